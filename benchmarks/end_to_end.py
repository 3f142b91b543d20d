#!/usr/bin/env python
"""Training fed end to end: the trainer reading JPEG webdataset shards through its real input pipeline, against the
step alone, and the time to save and restore the run's checkpoint.

  python benchmarks/end_to_end.py --model=ViT-B-16 --precision=bf16 --batch_size=256 --steps=60 --workers=14

1. Writes `--shards` img2dataset tars (`KEY.jpg`, `KEY.txt`) of `--side` px natural-photo JPEGs (quality 90, random
   crops of scikit-learn's two photographs: benchmarks/common.photo_jpeg) with the embedded dataset's captions, one shard
   per process (in parallel when there are several shards and cores); reused when present.
2. Trains `--steps` steps with `vlp_jax.training.loop.train_and_evaluate` from those shards (data.name='webdataset',
   grain with `--workers` worker processes; `--objective` (CLIP, or SLIP with `--augment_on=device` for its views
   made in the step), the preset's image size, no eval sets) and reads the trainer's own
   figures from metrics.jsonl: samples/s per logged interval (the compile step excluded), the fraction of the host's
   time spent waiting for the input pipeline (`perf/data_wait_fraction`) and for the device.
3. Saves the trained state with the trainer's `Checkpointer` (synchronously) and restores it, timed.
4. Times the step alone in the same process: the compiled train step on one batch kept on the device
   (`step_only_samples_per_sec`), so `input_bound` says whether the input pipeline or the step sets the pace
   (end to end below 90% of the step-only rate).

One JSON line. --model_config=tests/support.py gives the test suite's micro shapes (the dry run of benchmarks/gpu.sh).
"""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import pathlib
import platform
import statistics
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402
import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_sample_images  # noqa: E402

from benchmarks.common import build_config, photo_jpeg, real_batch, with_model_shapes  # noqa: E402
from vlp_jax import parallel  # noqa: E402
from vlp_jax.data.sources import synthetic_shapes as synthetic  # noqa: E402
from vlp_jax.training import Experiment, loop  # noqa: E402
from vlp_jax.training.checkpoint import Checkpointer  # noqa: E402

_MODEL = flags.DEFINE_string('model', 'ViT-B-16', 'Model preset (vlp_jax.models.PRESETS).')
_MODEL_CONFIG = flags.DEFINE_string('model_config', '', "A config file whose model shapes replace the preset's "
                                    '(tests/support.py: the micro model).')
_OBJECTIVE = flags.DEFINE_enum('objective', 'clip', ['clip', 'slip'], 'The objective trained (its default options); '
                                'the tars hold no long captions, which COSMOS needs.')
_AUGMENT_ON = flags.DEFINE_enum('augment_on', 'host', ['host', 'device'], "config.data.augment_on: 'device' makes "
                                "SLIP's three views in the step (data/image/device_augment.py).")
_PRECISION = flags.DEFINE_enum('precision', 'bf16', ['fp32', 'bf16'], 'Model compute precision.')
_ATTENTION = flags.DEFINE_string('attention', 'auto', 'config.model.attention.')
_BATCH = flags.DEFINE_integer('batch_size', 256, 'Global batch size.')
_STEPS = flags.DEFINE_integer('steps', 60, 'Training steps.')
_LOG_EVERY = flags.DEFINE_integer('log_every', 10, 'Steps per logged interval (one samples/s figure each).')
_WORKERS = flags.DEFINE_integer('workers', -1, 'grain worker processes (-1: the cores less two).')
_SHARDS = flags.DEFINE_integer('shards', 16, 'Tar shards to write.')
_PER_SHARD = flags.DEFINE_integer('per_shard', 512, 'Samples per shard.')
_SIDE = flags.DEFINE_integer('side', 256, 'Stored JPEG side (img2dataset --image_size).')
_DIR = flags.DEFINE_string('dir', os.path.join(tempfile.gettempdir(), 'vlp_jax_end_to_end'),
                           'Where the shards and the run go.')
_TIMED_STEPS = flags.DEFINE_integer('timed_steps', 10, 'Steps of the step-only timing.')


def write_tar(path: str, shard: int, count: int, side: int) -> str:
  """One img2dataset tar of `count` samples (KEY.jpg, KEY.txt) at `path`, written whole or not at all."""
  photos = load_sample_images().images
  rng = np.random.default_rng(shard)
  with tarfile.open(path + '.tmp', 'w') as tar:
    for i in range(count):
      key = f'{shard:05d}{i:04d}'
      caption = synthetic.make_example(0, 'train', synthetic.SOURCES[i % 3], shard * count + i, 16)['caption']
      for extension, data in (('jpg', photo_jpeg(photos, i, rng, side)), ('txt', caption.encode('utf-8'))):
        info = tarfile.TarInfo(f'{key}.{extension}')
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
  os.replace(path + '.tmp', path)
  return path


def write_tars(directory: str, shards: int, per_shard: int, side: int) -> tuple[list[str], float]:
  """(the shard paths, seconds spent writing); shards already there are kept."""
  os.makedirs(directory, exist_ok=True)
  paths = [os.path.join(directory, f'{i:05d}.tar') for i in range(shards)]
  todo = [(p, i, per_shard, side) for i, p in enumerate(paths) if not os.path.exists(p)]
  began = time.perf_counter()
  processes = min(len(todo), os.cpu_count() or 1)
  if processes > 1:  # a spawned process imports this module again: worth it only for several shards
    with multiprocessing.get_context('spawn').Pool(processes) as pool:
      pool.starmap(write_tar, todo)
  else:
    for args in todo:
      write_tar(*args)
  return paths, time.perf_counter() - began


def run_config(tar_dir: str, shards: int, workers: int):
  config = build_config(_MODEL.value, _BATCH.value, _OBJECTIVE.value, _PRECISION.value, remat=False,
                        attention=_ATTENTION.value)
  config.data.augment_on = _AUGMENT_ON.value
  if _MODEL_CONFIG.value:
    config = with_model_shapes(config, _MODEL_CONFIG.value)
  config.data.name = 'webdataset'
  config.data.path = os.path.join(tar_dir, f'{{00000..{shards - 1:05d}}}.tar')
  config.data.num_workers = workers
  config.data.cache_dir = os.path.join(_DIR.value, 'cache')
  config.eval.datasets = ()  # the training loop alone
  config.total_steps = _STEPS.value
  config.log_every_steps = _LOG_EVERY.value
  config.checkpoint.every_steps = _STEPS.value
  config.optim.warmup_steps = min(config.optim.warmup_steps, _STEPS.value)
  return config


def trainer_figures(workdir: str) -> dict:
  """The trainer's samples/s and wait fractions per logged interval, from its metrics.jsonl."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f]
  rows = [r for r in rows if 'perf/samples_per_sec' in r]
  if not rows:
    raise RuntimeError(f'{workdir}/metrics.jsonl has no perf/samples_per_sec rows: train more than --log_every steps')
  return {'samples_per_sec': [round(r['perf/samples_per_sec'], 1) for r in rows],
          'data_wait_fraction': [round(r['perf/data_wait_fraction'], 4) for r in rows],
          'device_wait_fraction': [round(r['perf/device_wait_fraction'], 4) for r in rows],
          # the trainer's perf/mfu (the architecture's FLOPs) and perf/mfu_executed (the step's own count)
          'mfu': [round(r['perf/mfu'], 4) for r in rows if 'perf/mfu' in r],
          'mfu_executed': [round(r['perf/mfu_executed'], 4) for r in rows if 'perf/mfu_executed' in r]}


def step_only_seconds(config, state, steps: int) -> list[float]:
  """Seconds per step of the trainer's compiled step on one batch of the same shapes kept on the device."""
  run = Experiment.from_config(config, parallel.make_mesh(1, jax.devices()[:1]))
  step_fn = run.compiled_step()
  batch = parallel.global_batch(real_batch(config, config.batch_size), run.mesh)
  rng = jax.random.key(1)
  state, metrics = step_fn(state, batch, rng)  # the compile
  jax.block_until_ready(metrics)
  seconds = []
  for _ in range(steps):
    began = time.perf_counter()
    state, metrics = step_fn(state, batch, rng)
    jax.block_until_ready(metrics)
    seconds.append(time.perf_counter() - began)
  return seconds


def checkpoint_seconds(state, config, directory: str) -> dict:
  """Seconds to save `state` with the trainer's Checkpointer (synchronous: until the files and manifest are
  written) and to restore it onto the device, with the bytes written."""
  checkpointer = Checkpointer(directory, keep=1, async_save=False)
  iterator = iter(grain.MapDataset.range(8).to_iter_dataset())
  began = time.perf_counter()
  checkpointer.save(1, state, iterator, config)
  saved = time.perf_counter() - began
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
                          if isinstance(x, jax.Array) else x, state)
  began = time.perf_counter()
  restored = checkpointer.restore(1, abstract, iterator)
  jax.block_until_ready(restored)
  restored_seconds = time.perf_counter() - began
  checkpointer.close()
  size = sum(f.stat().st_size for f in pathlib.Path(checkpointer.step_directory(1)).rglob('*') if f.is_file())
  return {'checkpoint_save_seconds': round(saved, 3), 'checkpoint_restore_seconds': round(restored_seconds, 3),
          'checkpoint_bytes': size}


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax's per-file INFO lines would bury the progress and the row
  workers = _WORKERS.value if _WORKERS.value >= 0 else max(1, (os.cpu_count() or 2) - 2)
  tar_dir = os.path.join(_DIR.value, f'tars-{_SHARDS.value}x{_PER_SHARD.value}-{_SIDE.value}')
  paths, write_seconds = write_tars(tar_dir, _SHARDS.value, _PER_SHARD.value, _SIDE.value)
  print(f'{len(paths)} shards of {_PER_SHARD.value} JPEGs ({_SIDE.value} px) in {tar_dir} '
        f'({write_seconds:.1f} s to write)', file=sys.stderr, flush=True)
  config = run_config(tar_dir, len(paths), workers)
  workdir = tempfile.mkdtemp(dir=_DIR.value, prefix='run-')
  began = time.perf_counter()
  result = loop.train_and_evaluate(config, workdir)
  run_seconds = time.perf_counter() - began
  figures = trainer_figures(workdir)
  steady = figures['samples_per_sec'][1:] or figures['samples_per_sec']  # the first interval warms the pipeline
  end_to_end = statistics.median(steady)
  # the save first: the step-only timing donates the state's buffers
  timed_checkpoint = checkpoint_seconds(result['state'], config, os.path.join(workdir, 'timed_checkpoint'))
  step_seconds = step_only_seconds(config, result['state'], _TIMED_STEPS.value)
  step_only = _BATCH.value / statistics.median(step_seconds)
  device = jax.devices()[0]
  row = {'benchmark': 'end_to_end', 'objective': _OBJECTIVE.value, 'augment_on': _AUGMENT_ON.value,
         'model': _MODEL.value, 'model_config': _MODEL_CONFIG.value,
         'precision': _PRECISION.value, 'attention': _ATTENTION.value, 'batch_size': _BATCH.value,
         'steps': _STEPS.value, 'grain_workers': workers, 'cpus': os.cpu_count(), 'shards': len(paths),
         'samples_per_shard': _PER_SHARD.value, 'jpeg_side': _SIDE.value, 'write_seconds': round(write_seconds, 1),
         'run_seconds': round(run_seconds, 1), 'end_to_end_samples_per_sec': round(end_to_end, 1),
         'step_only_samples_per_sec': round(step_only, 1),
         'end_to_end_over_step_only': round(end_to_end / step_only, 3),
         'input_bound': end_to_end < 0.9 * step_only, **figures,
         'device': device.device_kind, 'platform': device.platform, 'machine': platform.machine()}
  row.update(timed_checkpoint)
  print(json.dumps(row), flush=True)


if __name__ == '__main__':
  app.run(main)
