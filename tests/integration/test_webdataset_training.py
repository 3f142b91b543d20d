"""Training straight from webdataset tar shards (two sources, broken samples): killed with SIGKILL mid-run and
resumed, the run ends bit-identical to an uninterrupted one, with the bad samples counted by reason; ZeroVL's
single-source batches draw from the tar sources too. Shards drawn with replacement (data.resampled) resume exactly in
tests/integration/test_multihost.py (two processes, each reading its own shards) and
tests/unit/data/test_webdataset_tars.py (the stream's position)."""
import os
import re
import signal
import subprocess
import sys
import time

import chex
import pytest

from support import MICRO_CONFIG, ROOT, micro_config, write_webdataset
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

pytestmark = pytest.mark.slow  # trains, and starts subprocesses

STEPS, EVERY = 12, 3


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('wds'))
  write_webdataset(root, {'web': 2, 'studio': 2}, samples_per_shard=12)
  return f'{root}/web/{{00000..00001}}.tar,studio={root}/studio'


def _overrides(shards):
  return {'data.name': 'webdataset', 'data.path': shards, 'data.max_bad_fraction': 0.5, 'total_steps': STEPS,
          'checkpoint.every_steps': EVERY, 'eval.every_steps': STEPS, 'eval.tasks': ('zeroshot',)}


def _config(cache, shards):
  config = micro_config(cache)
  for key, value in _overrides(shards).items():
    node = config
    *parents, leaf = key.split('.')
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def _start(workdir, cache, shards):
  env = {**os.environ, 'VLP_JAX_CACHE': cache}
  flags = [f'--config.{k}={v}' for k, v in _overrides(shards).items()]
  return subprocess.Popen([sys.executable, '-m', 'vlp_jax.main', f'--config={MICRO_CONFIG}', f'--workdir={workdir}',
                           *flags], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint(process, workdir, step, timeout=120):
  """Block until the checkpoint of `step` is committed (orbax renames its folder to the step number when done)."""
  path, began = os.path.join(workdir, 'checkpoints', str(step)), time.time()
  while not os.path.isdir(path):
    assert process.poll() is None, f'no checkpoint {step}: the run exited {process.returncode}\n' + \
        process.communicate()[1][-3000:]
    assert time.time() - began < timeout, f'no checkpoint {step} within {timeout} s'
    time.sleep(0.02)


def test_sigkill_mid_run_then_resume_is_bit_identical(data_cache, shards, tmp_path, capsys):
  reference = str(tmp_path / 'reference')
  train_and_evaluate(_config(data_cache, shards), reference)
  workdir = str(tmp_path / 'killed')
  process = _start(workdir, data_cache, shards)
  # Once checkpoint 6's folder appears, checkpoint 3 (written before it, manifest included) is complete.
  _wait_for_checkpoint(process, workdir, 2 * EVERY)
  process.send_signal(signal.SIGKILL)
  process.communicate()
  assert process.returncode == -signal.SIGKILL
  # The restart runs in this process, with the same config and devices: a second start would only add its imports
  # and tracing.
  capsys.readouterr()
  train_and_evaluate(_config(data_cache, shards), workdir)
  out = capsys.readouterr().out
  assert 'Resumed from step' in out and f'Finished training at step {STEPS}' in out
  # the host memory held outside the devices, printed at start (data/loading/host_memory.py): the mapped index, the eval
  # sets
  assert re.search(r'Host memory: [\d.]+ GiB held outside the devices \(webdataset index [\d.]+ GiB, mapped once per '
                   r'host; eval sets [\d.]+ GiB per process\)', out), out
  chex.assert_trees_all_equal(load_variables(workdir)[0], load_variables(reference)[0])  # bit for bit
  losses = lambda w: {r['step']: r['train/loss'] for r in read_metrics(w) if 'train/loss' in r}  # noqa: E731
  assert losses(workdir) == losses(reference)
  # The broken samples of each source's first shard were replaced and counted by reason; both sources were read.
  last = [r for r in read_metrics(reference) if 'train/data/skipped/missing_image' in r][-1]
  assert last['train/data/skipped/missing_image'] > 0 and last['train/data/skipped/missing_caption'] > 0
  assert last['train/data/skipped/corrupt_image'] > 0
  assert last['train/data/examples/web'] > 0 and last['train/data/examples/studio'] > 0


def test_single_source_batches_from_tar_sources(data_cache, shards, tmp_path):
  config = _config(data_cache, shards)
  config.total_steps, config.batch_size, config.data.mixing = 4, 8, 'single_source'
  train_and_evaluate(config, str(tmp_path / 'single'))
  rows = [r for r in read_metrics(str(tmp_path / 'single')) if 'train/data/fraction/web' in r]
  # Each logged window is whole batches of one source each (log every 2 steps: 0, 0.5 or 1 of either source).
  assert all(r['train/data/fraction/web'] in (0.0, 0.5, 1.0) for r in rows)
  assert rows[-1]['train/data/examples/web'] + rows[-1]['train/data/examples/studio'] == 4 * 8

