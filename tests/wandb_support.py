"""What the tests of the Weights & Biases backend share: a skip mark without wandb, an offline W&B under the test's
tmp directory (a fixture), and readers of W&B's offline run files and of TensorBoard's event files."""
import glob
import importlib.util
import json
import math
import os
import struct
import sys

import pytest

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


def wandb_runs(wandb_dir):
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


def tensorboard_scalars_and_images(workdir):
  """({(tag, step): value} of every scalar, {(tag, step)} of every image) in the workdir's event files."""
  scalars, images = {}, set()
  for event in tensorboard_events(workdir):
    for value in event.summary.value:
      if value.HasField('image'):
        images.add((value.tag, event.step))
      else:
        scalars[(value.tag, event.step)] = value.simple_value
  return scalars, images


def same_value(a, b):
  return a == b or (math.isnan(a) and math.isnan(b))
