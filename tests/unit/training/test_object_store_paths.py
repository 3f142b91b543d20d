"""A run's paths on an object store (`gs://`) stay there: nothing goes through `os.path`, so no local `gs:` folder
appears and every file lands in the bucket. The bucket here is an in-memory fsspec filesystem registered for `gs://`
(what etils.epath uses without TensorFlow), so these tests reach no network; the real clients against a GCS
emulator are tests/integration/test_object_store_runs.py."""
from __future__ import annotations

import json
import os
import struct

import pytest

from fake_bucket import FakeBucket, bucket, objects  # noqa: F401 (bucket: a fixture)
from vlp_jax import errors, paths
from vlp_jax.checkpoint_files import resolve_checkpoint
from vlp_jax.cli.evaluate_command import default_output_dir
from vlp_jax.training import event_file, guards
from vlp_jax.training.checkpoint import Checkpointer
from vlp_jax.training.curves import plot_curves
from vlp_jax.training.loop import files_not_found
from vlp_jax.training.writer import MetricWriter, read_metrics, wandb_run_id


def test_path_helpers_keep_remote_paths_and_local_behaviour(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert paths.absolute('gs://bkt/run') == 'gs://bkt/run'
  assert paths.absolute('run') == os.path.join(str(tmp_path), 'run')  # relative local paths: absolute, as before
  assert paths.join('gs://bkt/run/', 'checkpoints', '7') == 'gs://bkt/run/checkpoints/7'
  assert paths.join('a', 'b') == os.path.join('a', 'b')
  assert paths.parent('gs://bkt/run/checkpoints/7/') == 'gs://bkt/run/checkpoints'
  assert paths.basename('s3://bkt/run/') == 'run' and paths.basename('/x/run/') == 'run'
  assert default_output_dir('gs://bkt/run/checkpoints/7/', 'k') == 'gs://bkt/run/eval/7/k'
  assert default_output_dir('gs://bkt/imported', 'k') == 'gs://bkt/imported-eval/k'
  assert os.listdir(tmp_path) == []


def test_run_files_go_to_the_bucket_not_a_local_gs_folder(bucket):
  guards.check_workdir_writable('gs://bkt/run')  # a probe object written and deleted in the bucket
  assert objects(bucket) == {}
  checkpointer = Checkpointer('gs://bkt/run', keep=2)
  assert checkpointer.directory == 'gs://bkt/run/checkpoints' and checkpointer.remote
  assert checkpointer.latest_complete_step() is None
  writer = MetricWriter('gs://bkt/run', resume_step=0)
  writer.write(1, {'train/loss': 2.5})
  # Each write reaches the bucket at once (a killed run keeps every record before its checkpoint).
  assert [r['train/loss'] for r in read_metrics('gs://bkt/run')] == [2.5]
  writer.write(2, {'train/loss': 2.0})
  curves = plot_curves('gs://bkt/run')
  assert curves == 'gs://bkt/run/curves.png'
  writer.write_images(2, {'plots/curves': curves})
  writer.close()
  checkpointer.close()
  stored = objects(bucket)
  assert [r['step'] for r in read_metrics('gs://bkt/run')] == [1, 2]
  assert stored['/bkt/run/curves.png'].startswith(b'\x89PNG')
  events = [key for key in stored if key.startswith('/bkt/run/events.out.tfevents.')]
  assert len(events) == 1
  data = stored[events[0]]
  (length,) = struct.unpack('<Q', data[:8])
  assert data[12:12 + length] == event_file.version_event(struct.unpack('<d', data[13:21])[0])
  assert b'train/loss' in data and b'plots/curves' in data and stored['/bkt/run/curves.png'] in data


def test_resume_on_the_bucket_drops_redone_metrics_and_keeps_the_wandb_id(bucket):
  writer = MetricWriter('gs://bkt/run', resume_step=0)
  for step in (1, 2, 3):
    writer.write(step, {'train/loss': float(step)})
  writer.close()
  first = wandb_run_id('gs://bkt/run', resume_step=0)
  writer = MetricWriter('gs://bkt/run', resume_step=2)  # resumed from the checkpoint of step 2: step 3 is redone
  assert [r['step'] for r in read_metrics('gs://bkt/run')] == [1, 2]
  writer.write(3, {'train/loss': 30.0})
  writer.close()
  assert [(r['step'], r['train/loss']) for r in read_metrics('gs://bkt/run')] == [(1, 1.0), (2, 2.0), (3, 30.0)]
  assert wandb_run_id('gs://bkt/run', resume_step=2) == first
  assert objects(bucket)['/bkt/run/wandb_run_id'] == (first + '\n').encode()


def test_remote_event_files_start_a_new_file_past_the_size_limit(bucket, monkeypatch):
  monkeypatch.setattr(event_file, 'REMOTE_FILE_BYTES', 200)
  writer = event_file.EventFileWriter('gs://bkt/run')
  for step in range(20):
    writer.write(event_file.scalar_event(0.0, step, 'train/loss', 1.0))
    writer.flush()
  writer.close()
  files = sorted(key for key in objects(bucket) if '/events.out.tfevents.' in key)
  assert len(files) > 1 and len(set(files)) == len(files)
  assert all(objects(bucket)[key].startswith(event_file.tfrecord(event_file.version_event(0.0))[:8]) for key in files)


def test_checkpoints_are_found_in_the_bucket(bucket):
  fs = FakeBucket()
  for step in (3, 10):
    fs.pipe(f'gs://bkt/run/checkpoints/{step}/state/_METADATA', b'{}')
    fs.pipe(f'gs://bkt/run/checkpoints/{step}/config/metadata', json.dumps({'step': step}).encode())
  assert resolve_checkpoint('gs://bkt/run') == 'gs://bkt/run/checkpoints/10'
  assert resolve_checkpoint('gs://bkt/run/checkpoints') == 'gs://bkt/run/checkpoints/10'
  assert resolve_checkpoint('gs://bkt/run/checkpoints/3') == 'gs://bkt/run/checkpoints/3'


def test_a_relative_local_workdir_is_still_made_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  checkpointer = Checkpointer('run', keep=1)
  try:
    assert checkpointer.directory == os.path.join(str(tmp_path), 'run', 'checkpoints')
    assert os.path.isdir(checkpointer.directory) and not checkpointer.remote
  finally:
    checkpointer.close()


def test_s3_checkpoints_are_refused_at_start_naming_what_works(tmp_path, monkeypatch, micro):
  """orbax-checkpoint 0.12 sends an s3:// path to tensorstore as a relative local path: refused before any client
  is asked (no network), exit code 2, saying what to use instead."""
  monkeypatch.chdir(tmp_path)
  with pytest.raises(errors.WorkdirError, match=r"workdir 's3://bkt/run'.*gs://.*[Mm]ount") as raised:
    guards.check_workdir_writable('s3://bkt/run')
  assert errors.exit_code(raised.value) == 2
  with pytest.raises(errors.ConfigError, match=r's3://bkt/run.*gs://'):
    resolve_checkpoint('s3://bkt/run')
  micro.init.checkpoint = 's3://bkt/run'
  assert [line for line in files_not_found(micro) if 'config.init.checkpoint' in line and 'gs://' in line]
  assert os.listdir(tmp_path) == []


def test_a_gs_workdir_without_gcsfs_stops_at_start_saying_what_to_install(monkeypatch):
  def without_gcsfs(path, data):
    raise ImportError('Install gcsfs to access Google Storage')  # what fsspec raises when gcsfs is missing
  monkeypatch.setattr(paths, 'write_bytes', without_gcsfs)
  with pytest.raises(errors.WorkdirError, match=r"workdir 'gs://bkt/run'.*pip install gcsfs") as raised:
    guards.check_workdir_writable('gs://bkt/run')
  assert errors.exit_code(raised.value) == 2
