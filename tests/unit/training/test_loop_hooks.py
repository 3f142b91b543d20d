"""The loop's hooks (training/hooks.py) in isolation, on a stand-in context: the order of dispatch and hooks, the
non-finite guard reading one step late, preemption and checkpoint saves, and the log line."""
import types

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from vlp_jax import errors, parallel
from vlp_jax.training import hooks, loop
from vlp_jax.training.progress import Progress, progress_line


def _context(last_step=6, start_step=0, **config):
  """What the hooks read of a TrainContext; `saved` lists the steps checkpointed."""
  cfg = ml_collections.ConfigDict({'total_steps': 6, 'batch_size': 8, 'log_every_steps': 2, 'max_nonfinite_steps': 2,
                                   'eval': {'every_steps': 3}, 'checkpoint': {'every_steps': 3}})
  cfg.update(config)
  saved = []
  checkpointer = types.SimpleNamespace(directory='/ckpt', step_directory=lambda s: f'/ckpt/{s}', poll=lambda: None)
  return types.SimpleNamespace(config=cfg, start_step=start_step, last_step=last_step, checkpointer=checkpointer,
                               progress=Progress(cfg.total_steps, cfg.batch_size, start_step), saved=saved,
                               save=saved.append)


class _Flag:
  """A step's non-finite flag that notes when the host reads it."""

  def __init__(self, step, value, reads):
    self.step, self.value, self.reads = step, value, reads

  def __array__(self, dtype=None, copy=None):
    self.reads.append(self.step)
    return np.asarray(self.value, dtype)


def test_the_nonfinite_guard_reads_each_step_one_step_late_and_stops_after_the_limit():
  reads = []
  metrics = lambda step, flag: {'nonfinite': _Flag(step, flag, reads)}  # noqa: E731
  ctx, hook = _context(last_step=6), hooks.NonFiniteHook(limit=2)
  hook.after_step(ctx, 1, metrics(1, 0.0))
  assert reads == []  # step 1 is not waited for before step 2 is dispatched
  hook.after_step(ctx, 2, metrics(2, 1.0))
  assert reads == [1] and hook.guard.total == 0  # step 2's flag is read at step 3
  hook.after_step(ctx, 3, metrics(3, 1.0))
  assert reads == [1, 2] and hook.guard.streak == 1 and ctx.saved == []
  with pytest.raises(errors.NonFiniteError, match=r'2 consecutive steps \(from step 2\).*checkpoint of step 4 in'):
    hook.after_step(ctx, 4, metrics(4, 0.0))
  assert reads == [1, 2, 3] and ctx.saved == [4]  # the step in hand: step 3's update was skipped, so 4 is good

  reads.clear()  # at the last step, its own flag is read too
  ctx, hook = _context(last_step=3), hooks.NonFiniteHook(limit=2)
  for step, flag in ((1, 0.0), (2, 0.0), (3, 1.0)):
    hook.after_step(ctx, step, metrics(step, flag))
  assert reads == [1, 2, 3] and hook.guard.total == 1 and ctx.saved == []


class _Watcher:
  def __init__(self, stop_from):
    self.stop_from, self.asked, self.signal_name = stop_from, [], 'SIGTERM'

  def should_stop(self, step):
    self.asked.append(step)
    return step >= self.stop_from


def _preemption_and_checkpoints(ctx, watcher, steps):
  chain = [h for h in hooks.default_hooks(ctx, watcher) if isinstance(h, (hooks.PreemptionHook, hooks.CheckpointHook))]
  for step in steps:
    for hook in chain:
      hook.after_step(ctx, step, {})


def test_preemption_saves_the_step_once_and_stops_except_at_the_last_step():
  ctx, watcher = _context(last_step=6), _Watcher(stop_from=10)
  _preemption_and_checkpoints(ctx, watcher, range(1, 7))
  assert ctx.saved == [3, 6] and watcher.asked == [1, 2, 3, 4, 5, 6]  # every process asks at every step
  ctx, watcher = _context(last_step=6), _Watcher(stop_from=3)  # a checkpoint step: saved once, not twice
  with pytest.raises(errors.Preempted, match='stopped after step 3 .* in /ckpt/3'):
    _preemption_and_checkpoints(ctx, watcher, range(1, 7))
  assert ctx.saved == [3]
  ctx, watcher = _context(last_step=4), _Watcher(stop_from=4)  # stop_at_step=4: saved there anyway, no error
  _preemption_and_checkpoints(ctx, watcher, range(1, 5))
  assert ctx.saved == [3, 4]


def test_a_data_error_at_a_log_step_saves_that_step_then_stops(capsys):
  def broken():
    raise errors.DataError('/data/bad.array_record: 10 of 20 records bad')
  ctx = _context()
  ctx.schedule = lambda step: 0.5
  ctx.record_stats = types.SimpleNamespace(metrics=broken)
  hook = hooks.LoggingHook(hooks.NonFiniteHook(2).guard)
  hook.after_step(ctx, 1, {'loss': jnp.float32(3.0)})  # not a log step: nothing read, nothing checked
  assert ctx.saved == [] and capsys.readouterr().out == ''
  with pytest.raises(errors.DataError, match='bad.array_record'):
    hook.after_step(ctx, 2, {'loss': jnp.float32(3.0)})
  assert ctx.saved == [2]


def test_the_progress_line():
  assert progress_line(4, 6, {'train/loss': 3.42219, 'perf/samples_per_sec': 190.14, 'perf/eta_seconds': 3725.2}
                       ) == 'step 4/6 | loss 3.4222 | 190.1 samples/s | ETA 1h02m05s'
  assert progress_line(1, 6, {'train/loss': 3.0}) == 'step 1/6 | loss 3.0000 | compiling'


def test_each_step_is_dispatched_before_its_hooks_and_the_first_one_is_waited_for(capsys):
  """`train` on a stand-in step: steps start_step + 1 ... last_step, each dispatched, then every hook in order."""
  events = []
  ctx = _context(last_step=5, start_step=2)
  ctx.mesh = parallel.make_mesh()
  ctx.data_iterator = iter([{'x': np.full((8,), i, np.float32)} for i in range(10)])
  ctx.record_stats = types.SimpleNamespace(update=lambda status: None)
  ctx.state, ctx.step_rng = jnp.int32(2), None

  def step_fn(state, batch, rng):
    events.append(('dispatch', int(state) + 1))
    return state + 1, {'x': batch['x']}
  ctx.step_fn = step_fn
  first_progress = ctx.progress

  class Recorder:
    def __init__(self, name):
      self.name = name

    def after_step(self, ctx, step, metrics):
      events.append((self.name, step))

  assert loop.train(ctx, [Recorder('a'), Recorder('b')]) == 5
  assert events == [('dispatch', 3), ('a', 3), ('b', 3), ('dispatch', 4), ('a', 4), ('b', 4),
                    ('dispatch', 5), ('a', 5), ('b', 5)]
  assert int(ctx.state) == 5
  # The compiling step is out of the throughput figures: timing restarts after it.
  assert ctx.progress is not first_progress and ctx.progress.last_step == 3
  assert capsys.readouterr().out == ('Compiling the train step (global batch 8) ...\n'  # said before it starts
                                     'Compiled and ran step 3.\n')
  ctx.start_step = ctx.last_step = 5  # nothing left to do (a stop_at_step already reached)
  assert loop.train(ctx, [Recorder('a')]) == 5 and len(events) == 9
