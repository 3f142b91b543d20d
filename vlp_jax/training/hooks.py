"""What the loop does after each train step, one hook per job, called in this order (`default_hooks`):

  1. NonFiniteHook    reads the *previous* step's non-finite flag (and, at the last step, this step's too), so that
                      the host waits for step n - 1 only after step n is dispatched; after too many skipped steps in
                      a row it checkpoints this step and raises NonFiniteError.
  2. PollSaveHook     writes the manifest of an asynchronous checkpoint whose files are committed.
  3. LoggingHook      every log_every_steps and at total_steps: train metrics, the data's record counts and the
                      throughput to the writer, and a progress line; a shard of mostly bad records checkpoints this
                      step and raises DataError.
  4. EvaluationHook   every eval.every_steps and at total_steps: the eval metrics to the writer (and a table, except
                      at total_steps, whose results are printed once at the end).
  5. PreemptionHook   asks the PreemptionWatcher at every step (every process must); on a stop signal before the last
                      step, checkpoints this step and raises Preempted.
  6. CheckpointHook   every checkpoint.every_steps and at the last step (total_steps or stop_at_step).

A hook is an object with `after_step(ctx, step, metrics)`: `ctx` the TrainContext (its `state` is the state after
`step`), `metrics` the step's metrics still on the devices. Reading them waits for the step to finish.
"""
from __future__ import annotations

import time
from typing import Any, Protocol

from vlp_jax import errors, parallel
from vlp_jax.evaluation import evaluate_variants
from vlp_jax.training import ema as ema_lib
from vlp_jax.training import guards
from vlp_jax.training.context import TrainContext
from vlp_jax.training.progress import print_summary, progress_line


class Hook(Protocol):
  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    """Called once per step, after it is dispatched; may checkpoint and raise to stop the run."""


class NonFiniteHook:
  """Counts steps whose update was skipped (non-finite loss or gradient) and stops the run after
  `config.max_nonfinite_steps` in a row. Reads each step's flag one step late (see the module docstring)."""

  def __init__(self, limit: int):
    self.guard = guards.NonFiniteGuard(limit)
    self.previous = None  # (step, metrics) of the step before, not yet read

  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    to_check = ([self.previous] if self.previous else []) + ([(step, metrics)] if step == ctx.last_step else [])
    began = time.perf_counter()
    for checked_step, checked in to_check:
      self.guard.record(checked_step, bool(parallel.to_host(checked['nonfinite']) > 0))
    ctx.progress.waited_for_device(time.perf_counter() - began)
    self.previous = (step, metrics)
    if self.guard.exceeded():
      ctx.save(step)
      raise errors.NonFiniteError(
          f'{self.guard.streak} consecutive steps (from step {self.guard.first_of_streak}) had a non-finite loss or '
          f'gradient, so their updates were skipped; stopping (config.max_nonfinite_steps={self.guard.limit}). The '
          f'last good parameters are saved in the checkpoint of step {step} in {ctx.checkpointer.directory}. Lower '
          'config.optim.lr, set config.optim.grad_clip_norm, or check the data.')


class PollSaveHook:
  """The manifest of an asynchronous save that has finished writing (cheap: every step)."""

  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    ctx.checkpointer.poll()


class LoggingHook:
  """Train metrics (`train/...`: the step's, the learning rate, the skipped-step count and the data's record
  counts) and the throughput (`perf/...`) to metrics.jsonl, with a progress line."""

  def __init__(self, nonfinite: guards.NonFiniteGuard):
    self.nonfinite = nonfinite

  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    config = ctx.config
    if not (step % config.log_every_steps == 0 or step == config.total_steps):
      return
    began = time.perf_counter()
    logged = {f'train/{k}': float(v) for k, v in parallel.to_host(metrics).items()}
    ctx.progress.waited_for_device(time.perf_counter() - began)
    logged['train/learning_rate'] = float(ctx.schedule(step - 1))
    logged['train/nonfinite_steps'] = self.nonfinite.total
    try:
      logged.update(ctx.record_stats.metrics())
    except errors.DataError:  # shards of mostly bad records: keep the work done, then stop
      ctx.save(step)
      raise
    logged.update(ctx.progress.tick(step))
    ctx.writer.write(step, logged)
    print(progress_line(step, config.total_steps, logged), flush=True)


def evaluate(ctx: TrainContext, step: int) -> dict[str, float]:
  """Every eval task on every eval set with the current parameters, written at `step`; the time is kept out of the
  throughput figures."""
  config = ctx.config
  ctx.progress.pause()
  began = time.perf_counter()
  # The trained model under the plain names; objectives with a teacher add it under a prefix (teacher_...), and an
  # EMA of the weights (config.ema.decay) comes as ema_...
  variants = ema_lib.eval_variants(ctx.objective, ctx.state.params, ctx.state.model_state,
                                   getattr(ctx.state, 'ema', None))
  metrics = evaluate_variants(ctx.encoder, variants.items(), ctx.eval_sets, tuple(config.eval.tasks),
                              config.eval.templates, naflex_max_patches=tuple(config.eval.naflex_max_patches),
                              preprocessing=ctx.objective.preprocessing)
  metrics['perf/eval_seconds'] = time.perf_counter() - began
  ctx.writer.write(step, metrics)
  if step < config.total_steps:  # the final results are printed once, at the end
    print_summary(metrics, f'Evaluation at step {step} ({metrics["perf/eval_seconds"]:.1f}s):')
  ctx.progress.resume()
  return metrics


class EvaluationHook:
  """Evaluates every `eval.every_steps` and at `total_steps`; the results become `ctx.last_eval`."""

  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    if step % ctx.config.eval.every_steps == 0 or step == ctx.config.total_steps:
      ctx.last_eval = evaluate(ctx, step)


class PreemptionHook:
  """On SIGTERM / SIGINT (see guards.PreemptionWatcher, which must be entered): checkpoint the step just done and
  raise Preempted, unless it is the last step, which the CheckpointHook saves anyway."""

  def __init__(self, watcher: guards.PreemptionWatcher):
    self.watcher = watcher

  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    if self.watcher.should_stop(step) and step < ctx.last_step:  # every process asks at every step
      ctx.save(step)
      raise errors.Preempted(step, self.watcher.signal_name, ctx.checkpointer.step_directory(step))


class CheckpointHook:
  """Checkpoints every `checkpoint.every_steps` and at the last step of this call."""

  def after_step(self, ctx: TrainContext, step: int, metrics: dict[str, Any]) -> None:
    if step % ctx.config.checkpoint.every_steps == 0 or step == ctx.last_step:
      ctx.save(step)


def default_hooks(ctx: TrainContext, watcher: guards.PreemptionWatcher) -> list[Hook]:
  """The hooks of a training run, in the order the module docstring gives."""
  nonfinite = NonFiniteHook(ctx.config.max_nonfinite_steps)
  return [nonfinite, PollSaveHook(), LoggingHook(nonfinite.guard), EvaluationHook(), PreemptionHook(watcher),
          CheckpointHook()]
