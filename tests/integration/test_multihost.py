"""Multi-host training on this machine: 2 processes x 4 CPU devices (jax.distributed, gloo collectives, host-local
data, one orbax checkpoint written by both) train exactly as 1 process with 8 devices. The data are webdataset tar
shards drawn with replacement (data.resampled), read by both processes: each reads its block of every global batch,
as from ArrayRecord (whose process blocks tests/unit/data/test_pipeline.py checks). With data.shards_by_process each
process reads its own shards instead (drawn with replacement there too), and two processes resume from a checkpoint
exactly."""
from support import (FAST_COMPILE_XLA_FLAGS, MICRO_CONFIG, ROOT, assert_trained_params_close, key_biases,
                     write_webdataset)
import pytest
import os
import shutil
import subprocess
import sys

import chex
import numpy as np

from vlp_jax.checkpoint_files import load_variables
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

CONFIG = MICRO_CONFIG


@pytest.mark.slow
def test_two_processes_train_like_one(micro, data_cache, tmp_path):
  micro.accumulation.update(mode='decoupled', micro_batch_size=8)  # the pod path with accumulation on
  micro.checkpoint.every_steps = 6  # only the final one is compared (the resume test below restarts from another)
  write_webdataset(str(tmp_path / 'wds'), {'web': 2, 'studio': 2}, samples_per_shard=12)
  data = {'name': 'webdataset', 'path': f'{tmp_path}/wds/web/{{00000..00001}}.tar,studio={tmp_path}/wds/studio',
          'max_bad_fraction': 0.5, 'resampled': True}
  micro.data.update(data)
  multi = tmp_path / 'multi'
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS  # the launcher gives each process its own 4 devices
  # The job starts first and the single process trains meanwhile: they share no compiled program (other devices), so
  # the job's start and compilation overlap the single run rather than follow it.
  job = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'launch', 'local.py'), '--processes=2', '--devices_per_process=4',
       f'--log_dir={tmp_path / "logs"}', '--timeout=400', '--', f'--config={CONFIG}', f'--workdir={multi}',
       '--config.accumulation.mode=decoupled', '--config.accumulation.micro_batch_size=8',
       '--config.checkpoint.every_steps=6',
       *(f'--config.data.{key}={value}' for key, value in data.items())],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  single = tmp_path / 'single'
  try:
    train_and_evaluate(micro, str(single))
    logs = job.communicate(timeout=450)[0]
  finally:
    if job.poll() is None:  # the single run failed: stop the job (the launcher stops both processes)
      job.terminate()
      job.communicate(timeout=60)
  assert job.returncode == 0, logs[-4000:] + open(tmp_path / 'logs' / 'process_1.log').read()[-3000:]
  assert '8 devices' in logs and 'Finished training at step 6' in logs

  # Collectives sum in another order. The attention key biases have a zero gradient (softmax ignores a shift shared
  # by every key), so what they get is that rounding, Adam-normalised into noise updates of ~1e-6 per step: they are
  # compared for staying at that noise, every other parameter to rounding.
  multi_params, single_params = load_variables(str(multi))[0], load_variables(str(single))[0]
  for params in (multi_params, single_params):
    for path, bias in key_biases(params):
      assert np.abs(bias).max() < 1e-4, path
  assert_trained_params_close(multi_params, single_params, rtol=1e-5)
  # Process 0 alone writes the metrics; the losses and eval results match the single process's.
  single_records, multi_records = list(read_metrics(str(single))), list(read_metrics(str(multi)))
  assert [r['step'] for r in multi_records] == [r['step'] for r in single_records]
  # Parameters equal to 2e-5 can still swap two near-tied similarities, which moves a recall or an accuracy by one
  # query: those fractions of the 96 test images may differ by one of them, every other value by rounding only.
  one_query = 1 / (micro.data.synthetic.num_test * len(micro.data.synthetic.sources))
  for got, want in zip(multi_records, single_records):
    for key in want:
      if key.startswith(('train/loss', 'eval/')):
        counted = key.startswith('eval/') and key.rsplit('_', 1)[-1] in ('r1', 'r5', 'r10', 'top1', 'top5')
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=one_query + 1e-6 if counted else 1e-5,
                                   err_msg=key)


def _launch(workdir, log_dir, data_cache, overrides):
  """`launch/local.py` with 2 processes x 1 device on the micro config; returns (returncode, [process 0's output,
  process 1's log])."""
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS  # the launcher gives each process its own device
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'launch', 'local.py'), '--processes=2', '--devices_per_process=1',
       f'--log_dir={log_dir}', '--timeout=400', '--', f'--config={CONFIG}', f'--workdir={workdir}',
       *(f'--config.{key}={value}' for key, value in overrides.items())],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=450)
  return result.returncode, [result.stdout + result.stderr, open(os.path.join(log_dir, 'process_1.log')).read()]


@pytest.mark.slow
def test_two_processes_reading_their_own_shards_resume_exactly(data_cache, tmp_path):
  write_webdataset(str(tmp_path / 'wds'), {'web': 2, 'studio': 2}, samples_per_shard=12)
  overrides = {'data.name': 'webdataset', 'data.path': f'{tmp_path}/wds/web/{{00000..00001}}.tar,studio='
               f'{tmp_path}/wds/studio', 'data.max_bad_fraction': 0.5, 'data.shards_by_process': True,
               'data.resampled': True,
               # no evaluation: only the parameters are compared (it would compile in every process of both runs)
               'total_steps': 4, 'checkpoint.every_steps': 2, 'eval.datasets': '()'}
  whole = str(tmp_path / 'whole')
  code, logs = _launch(whole, str(tmp_path / 'logs_whole'), data_cache, overrides)
  assert code == 0, logs[0][-3000:] + logs[1][-3000:]
  for p in (0, 1):  # 4 shards, every second one from the process's index
    assert f'Process {p} of 2 reads 2 of the 4 shards' in logs[p]
  # What a crash after checkpoint 2 leaves: the run is resumed from there, each process from its own data position.
  resumed = str(tmp_path / 'resumed')
  shutil.copytree(whole, resumed)
  shutil.rmtree(os.path.join(resumed, 'checkpoints', '4'))
  code, logs = _launch(resumed, str(tmp_path / 'logs_resumed'), data_cache, overrides)
  assert code == 0, logs[0][-3000:] + logs[1][-3000:]
  assert 'Resumed from step 2' in logs[0] and 'Finished training at step 4' in logs[0]
  chex.assert_trees_all_equal(load_variables(resumed)[0], load_variables(whole)[0])  # bit for bit
