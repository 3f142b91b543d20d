"""The optional Weights & Biases backend of the metric writer (training/writer.py, config.log.wandb_*): the same
scalars at the same steps as TensorBoard (and metrics.jsonl), the end-of-run plot as an image, the config as the
run's config, one W&B run across a resume; a bad mode names the key and the choices, and a missing wandb fails
before anything is compiled, saying how to install it. The tests that need wandb skip without it
(`pip install -e ".[wandb]"`); they run it offline, under the test's tmp directory."""
import glob
import importlib.util
import json
import math
import os
import struct
import sys

import pytest

from vlp_jax.config import ConfigError, base_config, validate
from vlp_jax.training import loop
from vlp_jax.training import writer as writer_lib
from vlp_jax.training.writer import read_metrics

from support import tensorboard_events

needs_wandb = pytest.mark.skipif(importlib.util.find_spec('wandb') is None,
                                 reason='wandb is not installed (pip install -e ".[wandb]")')


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
  """W&B offline and quiet, every file it writes under tmp_path/wandb_home; returns the WANDB_DIR."""
  home = tmp_path / 'wandb_home'
  monkeypatch.setenv('WANDB_MODE', 'offline')
  monkeypatch.setenv('WANDB_SILENT', 'true')
  monkeypatch.setenv('WANDB_DIR', str(home / 'runs'))
  for name in ('WANDB_CONFIG_DIR', 'WANDB_CACHE_DIR', 'WANDB_DATA_DIR', 'WANDB_ARTIFACT_DIR'):
    monkeypatch.setenv(name, str(home / name.lower()))
  for name in ('WANDB_PROJECT', 'WANDB_ENTITY', 'WANDB_RUN_ID', 'WANDB_RESUME', 'WANDB_NAME'):
    monkeypatch.delenv(name, raising=False)
  (home / 'runs').mkdir(parents=True)
  yield home / 'runs'
  if 'wandb' in sys.modules:  # wandb keeps the settings of its first run per process: forget them
    sys.modules['wandb'].teardown()


# ------------------------------------------------------------------------------------------------ file readers


def _wandb_records(path):
  """The records of a `.wandb` file: W&B's 7-byte header (':W&B', magic, version), then LevelDB's log format
  (32 KiB blocks of chunks: crc32 (4), length (2), type (1: full, 2: first, 3: middle, 4: last), data)."""
  from wandb.proto import wandb_internal_pb2
  with open(path, 'rb') as f:
    data = f.read()
  assert data[:4] == b':W&B', data[:7]
  chunks, partial, offset, block = [], b'', 7, 32768
  while offset + 7 <= len(data):
    if block - offset % block < 7:  # a block's tail too short for a chunk header is padding
      offset += block - offset % block
      continue
    _, length, kind = struct.unpack('<IHB', data[offset:offset + 7])
    chunk = data[offset + 7:offset + 7 + length]
    offset += 7 + length
    if kind == 1:
      chunks.append(chunk)
    elif kind == 2:
      partial = chunk
    elif kind == 3:
      partial += chunk
    elif kind == 4:
      chunks.append(partial + chunk)
  return [wandb_internal_pb2.Record.FromString(chunk) for chunk in chunks]


def _wandb_runs(wandb_dir):
  """Each offline run under `wandb_dir`, in the order started: {'id', 'name', 'config': {key: value},
  'history': {step: {key: value}}} (an image's fields under 'name/field')."""
  import wandb
  wandb.teardown()  # a finished run's records may still be on their way to its file until wandb shuts down
  runs = []
  paths = {os.path.realpath(p) for p in glob.glob(os.path.join(str(wandb_dir), '**', 'run-*.wandb'), recursive=True)}
  for path in paths:  # (the latest-run link leads to one of them)
    run = {'config': {}, 'history': {}}
    for record in _wandb_records(path):
      kind = record.WhichOneof('record_type')
      updates = []
      if kind == 'run':
        run['id'], run['name'] = record.run.run_id, record.run.display_name
        run['started'] = (record.run.start_time.seconds, record.run.start_time.nanos)
        updates = record.run.config.update
      elif kind == 'config':
        updates = record.config.update
      elif kind == 'history':
        row = run['history'].setdefault(record.history.step.num, {})
        for item in record.history.item:
          row[item.key or '/'.join(item.nested_key)] = json.loads(item.value_json)
      for item in updates:
        run['config'][item.key or '/'.join(item.nested_key)] = json.loads(item.value_json)
    runs.append(run)
  return sorted(runs, key=lambda run: run['started'])


def _tensorboard(workdir):
  """({(tag, step): value} of every scalar, {(tag, step)} of every image) in the workdir's event files."""
  scalars, images = {}, set()
  for event in tensorboard_events(workdir):
    for value in event.summary.value:
      if value.HasField('image'):
        images.add((value.tag, event.step))
      else:
        scalars[(value.tag, event.step)] = value.simple_value
  return scalars, images


def _same(a, b):
  return a == b or (math.isnan(a) and math.isnan(b))


# ---------------------------------------------------------------------------------------------------------- tests


def test_the_wandb_keys_default_to_off():
  log = base_config().log
  assert (log.wandb_project, log.wandb_entity, log.wandb_mode, log.wandb_run_name) == ('', '', 'online', '')
  assert 'peak_device_tflops' in log


def test_a_bad_wandb_mode_names_the_key_and_the_choices():
  config = base_config()
  config.log.wandb_mode = 'offlin'
  with pytest.raises(ConfigError, match=r"config.log.wandb_mode='offlin' is not valid; valid choices: "
                                        r"\['online', 'offline', 'disabled'\]"):
    validate(config)
  for mode in ('online', 'offline', 'disabled'):
    config.log.wandb_mode = mode
    validate(config)


def test_a_missing_wandb_fails_before_anything_is_compiled(micro, tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, 'wandb', None)  # `import wandb` raises ImportError, as when not installed

  def built(*args, **kwargs):
    raise AssertionError('the run was built (and would compile) before the missing wandb was reported')

  monkeypatch.setattr(loop, 'build_context', built)
  monkeypatch.setattr(loop.formats, 'train_paths', built)
  micro.log.wandb_project = 'vlp'
  with pytest.raises(ConfigError, match=r"config.log.wandb_project='vlp'.*wandb is not installed.*"
                                        r"`pip install wandb`"):
    loop.train_and_evaluate(micro, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()
  writer_lib.check_backends(base_config())  # no project: wandb is never imported


def test_the_run_id_is_kept_for_a_resume_and_new_for_a_fresh_start(tmp_path):
  workdir = str(tmp_path)
  first = writer_lib.wandb_run_id(workdir, resume_step=0)
  assert (tmp_path / writer_lib.WANDB_RUN_ID_FILE).read_text().strip() == first
  assert writer_lib.wandb_run_id(workdir, resume_step=3) == first
  fresh = writer_lib.wandb_run_id(workdir, resume_step=0)  # no checkpoint: metrics.jsonl starts over, so does W&B
  assert fresh != first and writer_lib.wandb_run_id(workdir, resume_step=5) == fresh
  (tmp_path / writer_lib.WANDB_RUN_ID_FILE).unlink()
  assert writer_lib.wandb_run_id(workdir, resume_step=5) not in (first, fresh)  # lost: a new one rather than none


def test_flat_config_uses_dotted_keys():
  flat = writer_lib.flat_config(base_config())
  assert flat['optim.lr'] == 5e-4 and flat['model.vision.type'] == 'vit' and flat['log.wandb_mode'] == 'online'
  assert flat['eval.datasets'] == ['synthetic'] and not any(isinstance(v, dict) for v in flat.values())


@needs_wandb
def test_the_backend_resumes_the_same_run_and_writes_into_the_workdir(tmp_path, offline_wandb, monkeypatch):
  monkeypatch.delenv('WANDB_DIR')  # the default place: workdir/wandb/
  config = base_config()
  config.log.update(wandb_project='vlp', wandb_mode='offline')
  workdir = tmp_path / 'my_run'
  ids = []
  for resume_step in (0, 3, 0):
    backend = writer_lib.WandB(str(workdir), config, resume_step)
    ids.append(backend.run.id)
    assert backend.run.name == 'my_run'
    backend.scalars(resume_step + 1, {'train/loss': 1.0})
    backend.close()
  assert ids[0] == ids[1] != ids[2]
  runs = _wandb_runs(workdir / 'wandb')
  assert [run['id'] for run in runs] == ids and all(run['name'] == 'my_run' for run in runs)
  config.log.wandb_run_name = 'named'
  backend = writer_lib.WandB(str(workdir), config, 4)
  assert backend.run.name == 'named' and backend.run.id == ids[2]
  backend.close()


@needs_wandb
@pytest.mark.slow
def test_wandb_gets_the_tensorboard_scalars_at_the_same_steps_across_a_resume(micro, tmp_path, offline_wandb):
  micro.log.update(wandb_project='vlp', wandb_mode='offline')
  workdir = tmp_path / 'run'
  first = loop.train_and_evaluate(micro, str(workdir), stop_at_step=3)
  assert first['step'] == 3
  second = loop.train_and_evaluate(micro, str(workdir))
  assert second['step'] == 6

  runs = _wandb_runs(offline_wandb)
  assert len(runs) == 2 and runs[0]['id'] == runs[1]['id']  # the resumed process continued the same W&B run
  assert runs[0]['name'] == 'run'
  for run in runs:  # the config, flattened, as the run's config (the second with its own values)
    assert run['config']['total_steps'] == 6 and run['config']['model.vision.width'] == 32
    assert run['config']['log.wandb_project'] == 'vlp' and run['config']['eval.tasks'] == list(micro.eval.tasks)

  wandb_scalars, wandb_images = {}, set()
  for run in runs:
    for step, row in run['history'].items():
      for key, value in row.items():
        if key.startswith('plots/'):
          wandb_images.add((key.rsplit('/', 1)[0], step))
        elif not key.startswith('_'):  # W&B's own _step, _runtime, _timestamp
          assert (key, step) not in wandb_scalars, f'{key} written twice at step {step}'
          wandb_scalars[(key, step)] = value
  tb_scalars, tb_images = _tensorboard(str(workdir))
  assert set(wandb_scalars) == set(tb_scalars)  # the same names at the same steps
  assert {step for _, step in tb_scalars} == {2, 3, 4, 6}  # log_every_steps=2, eval every 3, and the last step
  assert {'train/loss', 'train/learning_rate', 'perf/samples_per_sec', 'eval/synthetic/zeroshot_top1'} <= {
      name for name, _ in tb_scalars}
  import numpy as np
  for key, value in wandb_scalars.items():  # TensorBoard keeps float32
    assert _same(float(np.float32(value)), tb_scalars[key]), (key, value, tb_scalars[key])
  from_jsonl = {(k, r['step']): v for r in read_metrics(str(workdir)) for k, v in r.items() if k not in ('step',
                                                                                                         'time')}
  assert from_jsonl.keys() == wandb_scalars.keys()
  assert all(_same(wandb_scalars[key], value) for key, value in from_jsonl.items())  # exactly, as float64

  # The end-of-run plot at the last step of each call, to both.
  assert wandb_images == tb_images == {('plots/curves', 3), ('plots/curves', 6)}
  media = {os.path.realpath(p) for p in glob.glob(
      os.path.join(str(offline_wandb), '**', 'media', 'images', 'plots', 'curves_*.png'), recursive=True)}
  assert len(media) == 2 and all(open(p, 'rb').read(8) == b'\x89PNG\r\n\x1a\n' for p in media)
