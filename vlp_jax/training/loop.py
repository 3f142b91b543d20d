"""The training loop: data -> sharded step -> metrics, evaluation and checkpoints; resumes from `workdir`."""
from __future__ import annotations

import time
from typing import Any

import jax
import ml_collections
import numpy as np

from vlp_jax import config as config_lib
from vlp_jax import models, objectives, parallel
from vlp_jax import errors
from vlp_jax import evalsets
from vlp_jax.data import sources
from vlp_jax.data import mixing, pipeline
from vlp_jax.data.record_stats import RecordStats
from vlp_jax.evaluation import Encoder, run_evaluations
from vlp_jax.evaluation.results import summary_lines
from vlp_jax.objectives.base import tower_variables
from vlp_jax.training import guards
from vlp_jax.training.checkpoint import Checkpointer, load_pretrained
from vlp_jax.training.curves import plot_curves
from vlp_jax.training.optim import learning_rate_schedule, make_optimizer
from vlp_jax.training.state import TrainState, create_train_state
from vlp_jax.training.step import compile_train_step
from vlp_jax.training.writer import MetricWriter, read_metrics


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f'{hours}h{rest // 60:02d}m{rest % 60:02d}s' if hours else f'{rest // 60}m{rest % 60:02d}s'


class Progress:
  """Step rate and ETA over the training steps only (evaluation and checkpoint time excluded), and where the host's
  time goes: waiting for the input pipeline (`waited_for_data`) or for the devices' results (`waited_for_device`).
  The loop dispatches step n + 1 before it reads step n's results, so device time that is not waited for overlaps
  the input pipeline and the host's work."""

  def __init__(self, total_steps: int, batch_size: int, start_step: int):
    self.total_steps, self.batch_size = total_steps, batch_size
    self.last_step, self.last_time, self.train_seconds, self.train_steps = start_step, time.perf_counter(), 0.0, 0
    self.data_seconds = self.device_seconds = 0.0

  def waited_for_data(self, seconds: float) -> None:
    self.data_seconds += seconds

  def waited_for_device(self, seconds: float) -> None:
    self.device_seconds += seconds

  def pause(self) -> None:
    self.paused_at = time.perf_counter()

  def resume(self) -> None:
    self.last_time += time.perf_counter() - self.paused_at

  def tick(self, step: int) -> dict[str, float]:
    """Throughput since the last tick; {} when no step has been timed yet."""
    now = time.perf_counter()
    seconds, steps = now - self.last_time, step - self.last_step
    if steps == 0:
      return {}
    self.last_step, self.last_time = step, now
    self.train_seconds += seconds
    self.train_steps += steps
    rate = steps / max(seconds, 1e-9)
    mean_rate = self.train_steps / max(self.train_seconds, 1e-9)
    waits = {'perf/data_wait_fraction': self.data_seconds / max(seconds, 1e-9),
             'perf/device_wait_fraction': self.device_seconds / max(seconds, 1e-9)}
    self.data_seconds = self.device_seconds = 0.0
    return {'perf/samples_per_sec': rate * self.batch_size, 'perf/steps_per_sec': rate,
            'perf/step_seconds': seconds / steps, **waits,
            'perf/eta_seconds': (self.total_steps - step) / max(mean_rate, 1e-9)}


def print_summary(results: dict[str, float], header: str) -> None:
  """A readable table of eval metrics, with the chance levels beside the scores."""
  print('\n'.join([header, *summary_lines(results)]) + '\n', flush=True)


def latest_eval(workdir: str) -> dict[str, float]:
  """The most recent eval/* values in metrics.jsonl."""
  results = {}
  for record in read_metrics(workdir):
    results.update({k: v for k, v in record.items() if k.startswith('eval/')})
  return results


def initialize_from_checkpoint(config: ml_collections.ConfigDict, objective, tx, rng: jax.Array,
                               state_shardings: Any) -> TrainState:
  """A fresh train state whose towers come from `config.init.checkpoint` (a new optimizer state, step 0)."""
  params, model_state = jax.tree.map(np.asarray, objective.init_variables(rng))
  params, model_state, fresh = load_pretrained(config.init.checkpoint, params, model_state, config.model)
  print(f'Initialised from {config.init.checkpoint}' + (f'; fresh: {", ".join(fresh)}' if fresh else ''), flush=True)
  state = TrainState(step=np.zeros((), np.int32), params=params, model_state=model_state, opt_state=tx.init(params))
  return jax.device_put(state, state_shardings)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, stop_at_step: int | None = None
                       ) -> dict[str, Any]:
  """Train to `config.total_steps` (or until `stop_at_step`, saving a checkpoint there), evaluating and
  checkpointing on the way. Resumes from the latest checkpoint in `workdir`.

  Returns {'state': the final TrainState (None if training had already finished), 'eval': the last eval metrics,
  'step': the last step}.
  """
  config_lib.validate(config, num_devices=jax.device_count())
  paths = sources.train_paths(config.data)  # fails early, with instructions, when the data is missing
  guards.check_workdir_writable(workdir)  # and so does a read-only or full workdir
  checkpointer = Checkpointer(workdir, keep=config.checkpoint.keep, async_save=config.checkpoint.async_save)
  latest = checkpointer.latest_complete_step()  # a torn newest checkpoint is moved aside, not loaded
  if latest is not None and latest >= config.total_steps:
    results = latest_eval(workdir)
    print(f'Training already finished: {workdir} has a checkpoint at step {latest} of {config.total_steps}. '
          'Nothing to do.')
    if results:
      print_summary(results, 'Last evaluation:')
    checkpointer.close()
    return {'state': None, 'eval': results, 'step': latest}

  mesh = parallel.make_mesh(config.mesh.fsdp)
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  tx = make_optimizer(config.optim, config.total_steps)
  schedule = learning_rate_schedule(config.optim, config.total_steps)
  rng = jax.random.key(config.seed)
  init_rng, step_rng = jax.random.split(rng)

  try:
    shard_sources = mixing.shard_sources(paths, strict=config.data.mixing != 'mixed')  # from the records
    data_iterator = pipeline.train_iterator(
        paths, objectives.OBJECTIVES.get(config.objective.name).views(config), seed=config.seed,
        global_batch_size=config.batch_size, process_index=jax.process_index(), process_count=jax.process_count(),
        teacher_path=config.data.teacher_embeddings, num_workers=config.data.num_workers,
        num_threads=config.data.num_threads, mixing=config.data.mixing, sources=shard_sources,
        source_weights=config.data.source_weights, caption_field=config.data.caption_field)
  except ValueError as error:  # data settings that do not fit the data (weights, small sources): before compiling
    raise errors.ConfigError(str(error)) from error
  record_stats = RecordStats(paths, mixing.source_names(shard_sources), config.data.max_bad_fraction)

  abstract_state = jax.eval_shape(lambda r: create_train_state(objective, tx, r), init_rng)
  state_shardings = parallel.tree_shardings(abstract_state, mesh, config.mesh.fsdp_min_size)
  if latest is not None:
    abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_state,
                            state_shardings)
    state = checkpointer.restore(latest, abstract, data_iterator)
    print(f'Resumed from step {latest} in {checkpointer.directory}', flush=True)
  elif config.init.checkpoint:
    state = initialize_from_checkpoint(config, objective, tx, init_rng, state_shardings)
  else:
    state = jax.jit(lambda r: create_train_state(objective, tx, r), out_shardings=state_shardings)(init_rng)
  start_step = int(state.step)
  num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
  objective_name = ' + '.join((config.objective.name, *config.objective.terms))
  print(f'Model {config.model.name}: {num_params / 1e6:.2f}M parameters; objective {objective_name}; '
        f'{jax.device_count()} devices, mesh {dict(mesh.shape)}; global batch {config.batch_size}', flush=True)

  step_fn = compile_train_step(objective, tx, mesh, state_shardings, config.accumulation.mode,
                               config_lib.num_micro_batches(config))
  eval_sets = evalsets.load_eval_sets(config)
  encoder = Encoder(model, tower_variables(state.params, state.model_state), mesh, config.eval.batch_size,
                    config.model.text.context_length)
  writer = MetricWriter(workdir, resume_step=start_step)
  progress = Progress(config.total_steps, config.batch_size, start_step)
  last_step = min(config.total_steps, stop_at_step or config.total_steps)
  results = latest_eval(workdir) if start_step else {}

  def evaluate(step: int) -> dict[str, float]:
    progress.pause()
    began = time.perf_counter()
    metrics = {}
    # The trained model under the plain names; objectives with a teacher add it under a prefix (teacher_...).
    for prefix, variables in objective.eval_variants(state.params, state.model_state).items():
      encoder.variables = variables
      metrics.update(run_evaluations(encoder, eval_sets, tuple(config.eval.tasks), prefix,
                                           config.eval.templates))
    metrics['perf/eval_seconds'] = time.perf_counter() - began
    writer.write(step, metrics)
    if step < config.total_steps:  # the final results are printed once, at the end
      print_summary(metrics, f'Evaluation at step {step} ({metrics["perf/eval_seconds"]:.1f}s):')
    progress.resume()
    return metrics

  nonfinite = guards.NonFiniteGuard(config.max_nonfinite_steps)
  previous = None  # (step, metrics) of the step before: read one step late, so that dispatch runs ahead

  def save(step: int) -> None:
    progress.pause()
    checkpointer.save(step, state, data_iterator, config)
    progress.resume()

  step = start_step
  try:
    with guards.PreemptionWatcher() as preemption:
      for step in range(start_step + 1, last_step + 1):
        began = time.perf_counter()
        local_batch, status = pipeline.pop_status(next(data_iterator))
        record_stats.update(status)
        batch = parallel.global_batch(local_batch, mesh)
        progress.waited_for_data(time.perf_counter() - began)
        state, metrics = step_fn(state, batch, step_rng)
        if step == start_step + 1:  # the first step compiles; keep it out of the throughput figures
          jax.block_until_ready(state)
          progress = Progress(config.total_steps, config.batch_size, step)
          print(f'Compiled and ran step {step}.', flush=True)
        to_check = ([previous] if previous else []) + ([(step, metrics)] if step == last_step else [])
        began = time.perf_counter()
        for checked_step, checked in to_check:
          nonfinite.record(checked_step, bool(parallel.to_host(checked['nonfinite']) > 0))
        progress.waited_for_device(time.perf_counter() - began)
        previous = (step, metrics)
        checkpointer.poll()  # the manifest of an async save that has finished writing
        if nonfinite.exceeded():
          save(step)
          raise errors.NonFiniteError(
              f'{nonfinite.streak} consecutive steps (from step {nonfinite.first_of_streak}) had a non-finite loss or '
              f'gradient, so their updates were skipped; stopping (config.max_nonfinite_steps='
              f'{config.max_nonfinite_steps}). The last good parameters are saved in the checkpoint of step {step} '
              f'in {checkpointer.directory}. Lower config.optim.lr, set config.optim.grad_clip_norm, or check the '
              'data.')
        if step % config.log_every_steps == 0 or step == config.total_steps:
          began = time.perf_counter()
          metrics = {f'train/{k}': float(v) for k, v in parallel.to_host(metrics).items()}
          progress.waited_for_device(time.perf_counter() - began)
          metrics['train/learning_rate'] = float(schedule(step - 1))
          metrics['train/nonfinite_steps'] = nonfinite.total
          try:
            metrics.update(record_stats.metrics())
          except errors.DataError:  # shards of mostly bad records: keep the work done, then stop
            save(step)
            raise
          metrics.update(progress.tick(step))
          writer.write(step, metrics)
          rate = metrics.get('perf/samples_per_sec')
          print(f'step {step}/{config.total_steps} | loss {metrics["train/loss"]:.4f} | '
                + (f'{rate:.1f} samples/s | ETA {format_duration(metrics["perf/eta_seconds"])}' if rate
                   else 'compiling'), flush=True)
        if step % config.eval.every_steps == 0 or step == config.total_steps:
          results = evaluate(step)
        stop = preemption.should_stop(step) and step < last_step  # every process asks at every step
        if stop or step % config.checkpoint.every_steps == 0 or step == last_step:
          save(step)
        if stop:
          raise errors.Preempted(step, preemption.signal_name, checkpointer.step_directory(step))
  finally:  # every way out (done, preempted, non-finite, an error) closes the files
    writer.close()
    checkpointer.close()
  if step >= config.total_steps and results:
    print_summary(results, f'Finished training at step {step}. Results on the {config.eval.split} split:')
  if jax.process_index() == 0 and (curves := plot_curves(workdir)):
    print(f'Training curves: {curves}', flush=True)
  return {'state': state, 'eval': results, 'step': step}
