"""Reliability guarantees, each with its fault really injected (docs/reliability.md): SIGKILL at a random step then
resume, SIGTERM, a torn checkpoint, NaN batches, and an unusable workdir."""
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import chex
import jax
import numpy as np
from safetensors.numpy import save_file
from support import MICRO_CONFIG, ROOT, wait_for_step
import pytest

from vlp_jax import parallel
from vlp_jax.cli import weights_command
from vlp_jax.data import formats
from vlp_jax import errors
from vlp_jax.training.checkpoint import Checkpointer
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

from support import compiled_step, micro_config

CONFIG = MICRO_CONFIG
STEPS, EVERY = 24, 4
LONG_RUN = [f'--config.total_steps={STEPS}', f'--config.checkpoint.every_steps={EVERY}',
            f'--config.eval.every_steps={STEPS}', "--config.eval.tasks=('zeroshot',)"]  # the evaluators: elsewhere


def _long_config(cache):
  config = micro_config(cache)
  config.total_steps, config.checkpoint.every_steps, config.eval.every_steps = STEPS, EVERY, STEPS
  config.eval.tasks = ('zeroshot',)
  return config


@pytest.fixture(scope='module')
def reference(data_cache, tmp_path_factory):
  """The uninterrupted run the interrupted ones must reproduce."""
  workdir = str(tmp_path_factory.mktemp('reference'))
  train_and_evaluate(_long_config(data_cache), workdir)
  return workdir


def _start(workdir, data_cache, *extra, **popen):
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache}  # XLA_FLAGS: the same 8 devices as this process
  return subprocess.Popen([sys.executable, '-m', 'vlp_jax.main', f'--config={CONFIG}', f'--workdir={workdir}',
                           *LONG_RUN, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **popen)


@pytest.mark.slow
def test_sigterm_then_sigkill_at_a_random_step_then_resume_is_bit_identical(reference, data_cache, tmp_path, capsys):
  """One run, interrupted twice: preempted by SIGTERM (it finishes the step, checkpoints it and exits 75 in bounded
  time), restarted, killed by SIGKILL at a random later step, restarted again (in this process, with the same config
  and devices: a third start would only add its imports and tracing): bit-identical to the reference."""
  workdir = str(tmp_path / 'interrupted')
  process = _start(workdir, data_cache)
  wait_for_step(process, workdir, 6)
  sent = time.time()
  process.send_signal(signal.SIGTERM)
  out, err = process.communicate(timeout=60)  # bounded: one step and one checkpoint
  assert process.returncode == errors.EXIT_PREEMPTED, err[-3000:]
  assert 'SIGTERM received' in out and 'Run the same command to resume' in err
  stopped = int(err.split('stopped after step ')[1].split()[0])
  assert stopped < STEPS and time.time() - sent < 60
  checkpointer = Checkpointer(workdir)
  assert checkpointer.latest_complete_step() == stopped  # the step it was on, not only the last periodic one
  checkpointer.close()

  kill_after = random.randint(stopped + 2, STEPS - 4)
  process = _start(workdir, data_cache)
  reached = wait_for_step(process, workdir, kill_after)
  process.send_signal(signal.SIGKILL)
  out, _ = process.communicate()
  assert process.returncode == -signal.SIGKILL, f'killed after step {reached}'
  assert f'Resumed from step {stopped}' in out

  capsys.readouterr()
  train_and_evaluate(_long_config(data_cache), workdir)
  out = capsys.readouterr().out
  assert 'Resumed from step' in out and f'Finished training at step {STEPS}' in out
  chex.assert_trees_all_equal(load_variables(workdir)[0], load_variables(reference)[0])  # bit for bit
  losses = lambda w: {r['step']: r['train/loss'] for r in read_metrics(w) if 'train/loss' in r}  # noqa: E731
  assert losses(workdir) == losses(reference)


@pytest.mark.slow
def test_a_torn_checkpoint_is_moved_aside_and_the_previous_one_used(reference, data_cache, tmp_path, capsys):
  workdir = tmp_path / 'torn'
  shutil.copytree(reference, workdir)  # a finished run with checkpoints every EVERY steps
  # Tear the newest checkpoint as a crash mid-write would: its largest file loses its second half.
  files = [os.path.join(r, f) for r, _, fs in os.walk(workdir / 'checkpoints' / str(STEPS)) for f in fs]
  largest = max(files, key=os.path.getsize)
  with open(largest, 'r+b') as f:
    f.truncate(os.path.getsize(largest) // 2)
  capsys.readouterr()
  again = train_and_evaluate(_long_config(data_cache), str(workdir))
  out = capsys.readouterr().out
  assert f'Checkpoint step {STEPS} is incomplete or corrupt' in out and f'Resumed from step {STEPS - EVERY}' in out
  moved = [d for d in os.listdir(workdir / 'checkpoints') if d.startswith(f'corrupt-{STEPS}-')]
  assert len(moved) == 1  # kept for inspection, not deleted
  chex.assert_trees_all_equal(parallel.to_host(again['state'].params), load_variables(reference)[0])


def _inject_nan(monkeypatch, at_calls):
  """Make the images of the given global_batch calls (1-based, in this run) NaN: float32 images, which the step takes
  as already normalised (the pipeline's are uint8, which cannot hold a NaN)."""
  original, calls = parallel.global_batch, [0]

  def poisoned(local, mesh):
    calls[0] += 1
    if calls[0] in at_calls:
      local = {**local, 'image': np.full(local['image'].shape, np.nan, np.float32)}
    return original(local, mesh)
  monkeypatch.setattr(parallel, 'global_batch', poisoned)


@pytest.mark.slow
def test_a_nan_batch_skips_its_update_and_is_counted(micro, tmp_path, monkeypatch, capsys):
  micro.eval.every_steps = 100
  _inject_nan(monkeypatch, {3})
  result = train_and_evaluate(micro, str(tmp_path / 'nan'))
  assert 'step 3: non-finite loss or gradient; update skipped' in capsys.readouterr().out
  logged = {r['step']: r for r in read_metrics(str(tmp_path / 'nan')) if 'train/loss' in r}
  assert logged[2]['train/nonfinite_steps'] == 0 and logged[4]['train/nonfinite_steps'] == 1
  assert logged[6]['train/nonfinite_steps'] == 1 and logged[4]['train/nonfinite'] == 0  # training goes on
  assert result['step'] == 6
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(parallel.to_host(result['state'].params)))


@pytest.mark.slow
def test_nan_update_leaves_params_and_optimizer_unchanged(micro):
  mesh = parallel.make_mesh()
  step, state = compiled_step(micro, mesh)  # the state from a jitted init: an eager one compiles op by op
  rng = np.random.default_rng(0)
  s, length = micro.model.vision.image_size, micro.model.text.context_length
  text = rng.integers(1, 49000, (16, length)).astype(np.int32)
  text[:, 0], text[:, 5] = 49406, 49407
  good = {'image': rng.normal(size=(16, s, s, 3)).astype(np.float32), 'text': text}
  state, metrics = step(state, parallel.global_batch(good, mesh), jax.random.key(1))
  before = parallel.to_host(state)
  bad = {**good, 'image': np.where(np.arange(16)[:, None, None, None] == 3, np.inf, good['image'])}
  state, metrics = step(state, parallel.global_batch(bad, mesh), jax.random.key(1))
  after = parallel.to_host(state)
  assert float(metrics['nonfinite']) == 1.0 and int(after.step) == int(before.step) + 1
  chex.assert_trees_all_equal(after.params, before.params)
  chex.assert_trees_all_equal(after.opt_state, before.opt_state)
  state, metrics = step(state, parallel.global_batch(good, mesh), jax.random.key(1))
  assert float(metrics['nonfinite']) == 0.0


@pytest.mark.slow
def test_consecutive_nan_steps_stop_the_run_keeping_the_last_good_state(micro, tmp_path, monkeypatch):
  micro.eval.every_steps = 100
  micro.max_nonfinite_steps = 2
  good = train_and_evaluate(micro, str(tmp_path / 'good'), stop_at_step=2)
  _inject_nan(monkeypatch, {3, 4, 5, 6})
  with pytest.raises(errors.NonFiniteError, match=r'2 consecutive steps \(from step 3\).*checkpoint of step'):
    train_and_evaluate(micro, str(tmp_path / 'bad'))
  saved = Checkpointer(str(tmp_path / 'bad'))
  step = saved.latest_complete_step()
  saved.close()
  assert step in (4, 5)
  chex.assert_trees_all_equal(load_variables(str(tmp_path / 'bad'))[0], parallel.to_host(good['state'].params))


@pytest.mark.slow
def test_an_unusable_workdir_fails_before_compiling(micro, data_cache, tmp_path):
  formats.train_paths(micro.data)  # the data exists: only the workdir is wrong
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache}
  run = lambda workdir, **kw: subprocess.run(  # noqa: E731
      [sys.executable, '-m', 'vlp_jax.main', f'--config={CONFIG}', f'--workdir={workdir}'], cwd=ROOT, env=env,
      capture_output=True, text=True, timeout=300, **kw)
  result = run(blocker / 'run')
  assert result.returncode == errors.EXIT_CONFIG, result.stderr[-2000:]
  assert f"workdir '{blocker / 'run'}' is not usable" in result.stderr and 'Compiled' not in result.stdout

  # Every write past 64 KiB fails (RLIMIT_FSIZE, with SIGXFSZ ignored so that write() returns EFBIG), as on a full
  # disk; set in a shell around the child rather than with preexec_fn, which forks this multithreaded process.
  command = (f"trap '' XFSZ; ulimit -f 64; exec {sys.executable} -m vlp_jax.main --config={CONFIG} "
             f"--workdir={tmp_path / 'full'}")
  result = subprocess.run(['bash', '-c', command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == errors.EXIT_CONFIG, result.stderr[-2000:]
  assert 'is not usable: the file size limit is reached' in result.stderr and 'Compiled' not in result.stdout
  assert os.listdir(tmp_path / 'full') == []  # the probe is removed


class _Payload:  # an arbitrary object: loading it would need unpickling code
  def __reduce__(self):
    return (os.system, ('touch /tmp/vlp_jax_pwned',))


def test_bad_weight_files_give_a_clear_error_and_run_nothing(tmp_path, capsys):
  good = tmp_path / 'model.safetensors'
  save_file({'logit_scale': np.zeros((), np.float32), 'positional_embedding': np.zeros((77, 512), np.float32)},
            str(good))
  truncated = tmp_path / 'truncated.safetensors'
  truncated.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
  args = lambda path: ['import', '--format=open_clip', '--model=ViT-B-32', f'--input={path}',  # noqa: E731
                       f'--output={tmp_path / "out"}']
  assert weights_command.main(args(truncated)) == 2
  assert 'truncated.safetensors is not a readable .safetensors file (truncated or corrupt?)' in capsys.readouterr().err
  assert weights_command.main(args(good)) == 2  # the wrong architecture: every missing key is listed
  assert 'missing parameters' in capsys.readouterr().err
  torch = pytest.importorskip('torch', reason='torch is needed to write .pt files')
  torch.save({'w': torch.zeros(3)}, str(tmp_path / 'whole.pt'))
  (tmp_path / 'cut.pt').write_bytes((tmp_path / 'whole.pt').read_bytes()[:200])
  assert weights_command.main(args(tmp_path / 'cut.pt')) == 2
  assert 'could not be read as a torch state dict (truncated or corrupt?)' in capsys.readouterr().err
  torch.save({'x': _Payload()}, str(tmp_path / 'evil.pt'))
  assert weights_command.main(args(tmp_path / 'evil.pt')) == 2
  assert 'unpickling them would run code' in capsys.readouterr().err
  assert not os.path.exists('/tmp/vlp_jax_pwned') and not (tmp_path / 'out').exists()
