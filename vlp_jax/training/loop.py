"""The training loop: data -> sharded step -> hooks (non-finite guard, logging, evaluation, preemption,
checkpoints; training/hooks.py); resumes from `workdir`.

`train_and_evaluate` checks the config, the data and the workdir, returns at once when the run is already finished,
builds a `TrainContext` (`build_context`), runs `train` and prints the results.
"""
from __future__ import annotations

import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from vlp_jax import config as config_lib
from vlp_jax import hardware, parallel, paths
from vlp_jax import errors
from vlp_jax import evalsets
from vlp_jax.evalsets import budget as eval_budget
from vlp_jax.data import formats
from vlp_jax.data.loading import host_memory, pipeline
from vlp_jax.data.loading.record_stats import RecordStats
from vlp_jax.evaluation import Encoder, report_evaluated
from vlp_jax.objectives.base import tower_variables
from vlp_jax.training import guards, stages, start_checks
from vlp_jax.training.checkpoint import Checkpointer, load_config, load_pretrained
from vlp_jax.training.context import TrainContext
from vlp_jax.training.curves import plot_curves
from vlp_jax.training.experiment import Experiment
from vlp_jax.training.hooks import Hook, default_hooks
from vlp_jax.training.progress import Progress, end_summary, print_summary
from vlp_jax.training.state import TrainState, with_ema
from vlp_jax.training.watchdog import StepWatchdog
from vlp_jax.training.writer import MetricWriter, check_backends, read_metrics


def latest_eval(workdir: str) -> dict[str, float]:
  """The most recent eval/* values in metrics.jsonl."""
  results = {}
  for record in read_metrics(workdir):
    results.update({k: v for k, v in record.items() if k.startswith('eval/')})
  return results


def report_finished(workdir: str, latest: int, total_steps: int) -> dict[str, float]:
  """Say that `workdir` already holds the last step, with the last evaluation; returns its metrics."""
  results = latest_eval(workdir)
  print(f'Training already finished: {workdir} has a checkpoint at step {latest} of {total_steps}. Nothing to do.')
  if results:
    print_summary(results, 'Last evaluation:')
  return results


def initialize_from_checkpoint(experiment: Experiment, rng: jax.Array) -> TrainState:
  """A fresh train state whose towers come from `config.init.checkpoint` (a new optimizer state, step 0; the EMA,
  with config.ema.decay, starts at the loaded parameters)."""
  config, objective, tx = experiment.stage, experiment.objective, experiment.tx
  params, model_state = jax.tree.map(np.asarray, objective.init_variables(rng))
  try:
    params, model_state, fresh = load_pretrained(config.init.checkpoint, params, model_state, config.model)
  except ValueError as error:  # a checkpoint that does not fit the model: before compiling, exit 2
    raise errors.ConfigError(str(error)) from error
  model_state = objective.after_load(params, model_state)  # e.g. an EMA teacher starts as the loaded tower
  loaded = sorted(name for name in params if name not in fresh)  # `fresh` names a whole new subtree by its root
  print(f'Initialised from {config.init.checkpoint}: loaded {", ".join(loaded)}'
        + (f'; fresh: {", ".join(fresh)}' if fresh else ''), flush=True)
  state = with_ema(TrainState(step=np.zeros((), np.int32), params=params, model_state=model_state,
                              opt_state=tx.init(params)), config.ema.decay)
  return jax.device_put(state, experiment.state_shardings)


def build_data(experiment: Experiment, paths: list[str]) -> tuple[Any, RecordStats]:
  """This process's training batches (a grain iterator, checkpointed with the state) and the bad-record counter."""
  config = experiment.config
  try:
    views = experiment.views
    return formats.train_batches(config.data, paths, views, seed=config.seed, batch_size=config.batch_size,
                                 process_index=jax.process_index(), process_count=jax.process_count())
  except ValueError as error:  # data settings that do not fit the data (weights, small sources): before compiling
    raise errors.ConfigError(str(error)) from error


def check_resume_layout(step_dir: str, model_config: ml_collections.ConfigDict, ema_decay: float = 0.0) -> None:
  """Raise ConfigError when the checkpoint to resume stores its blocks in the other layout (model.scan_layers): the
  optimizer state is restored as saved. (Evaluation, export and init.checkpoint convert; resuming does not.) So
  does a checkpoint with an EMA of the weights resumed without one (config.ema.decay 0), or the other way round."""
  saved_config = load_config(step_dir)
  saved = bool(saved_config.model.get('scan_layers', False))
  if saved != bool(model_config.get('scan_layers', False)):
    raise errors.ConfigError(f'the checkpoint to resume ({step_dir}) was written with '
                             f'config.model.scan_layers={saved}; resume with --config.model.scan_layers={saved}, or '
                             'start a new run from it with --config.init.checkpoint (which converts the layout)')
  saved_decay = saved_config.ema.decay
  if bool(saved_decay) != bool(ema_decay):
    raise errors.ConfigError(f'the checkpoint to resume ({step_dir}) was written with config.ema.decay={saved_decay} '
                             f'and this run has config.ema.decay={ema_decay}: the EMA of the weights is kept from the '
                             'first step or not at all; resume with '
                             + ('a decay in (0, 1)' if saved_decay else '--config.ema.decay=0')
                             + ', or start a new run from it with --config.init.checkpoint')


def build_state(experiment: Experiment, init_rng: jax.Array, checkpointer: Checkpointer, latest: int | None,
                data_iterator) -> TrainState:
  """The train state in `experiment.state_shardings`: restored from step `latest` (the data iterator too), else
  initialised from `config.init.checkpoint`, else fresh."""
  config = experiment.stage
  if latest is not None:
    check_resume_layout(checkpointer.step_directory(latest), config.model, config.ema.decay)
    state = checkpointer.restore(latest, experiment.abstract_state, data_iterator)
    print(f'Resumed from step {latest} in {checkpointer.directory}', flush=True)
  elif config.init.checkpoint:
    state = initialize_from_checkpoint(experiment, init_rng)
  else:
    state = experiment.init_state(init_rng)
  return state


def build_context(config: ml_collections.ConfigDict, workdir: str, paths: list[str], checkpointer: Checkpointer,
                  latest: int | None, stop_at_step: int | None) -> TrainContext:
  """Mesh, model, objective, optimizer, data, state (restored when `latest`), the compiled step, eval sets and the
  metric writer, in that order."""
  # with config.data.resolution_stages: the model, state and step of the stage the state to restore is at
  # validated once at the start, with the inputs (check_config_and_inputs)
  experiment = Experiment.from_config(config, step=latest or 0, validate=False)
  mesh = experiment.mesh
  init_rng, step_rng = jax.random.split(jax.random.key(config.seed))
  data_iterator, record_stats = build_data(experiment, paths)
  # what the host will hold outside the devices, from the config before any eval set loads or the step compiles:
  # refused (exit 2) when it cannot fit
  held = eval_budget.host_memory(config, record_stats.mapped_bytes)
  print(f'Host memory: {host_memory.check(held, hardware.host_memory_bytes())}', flush=True)
  state = build_state(experiment, init_rng, checkpointer, latest, data_iterator)
  start_step = int(state.step)
  num_params = experiment.parameter_count
  objective_name = ' + '.join((config.objective.name, *config.objective.terms))
  print(f'Model {config.model.name}: {num_params / 1e6:.2f}M parameters; objective {objective_name}; '
        f'{jax.device_count()} devices, mesh {dict(mesh.shape)}; global batch {config.batch_size}', flush=True)

  step_fn = experiment.compiled_step()
  eval_sets = evalsets.load_eval_sets(config)
  report_evaluated(eval_sets, tuple(config.eval.tasks))  # once, not at each evaluation
  encoder = Encoder(experiment.model, tower_variables(state.params, state.model_state), mesh,
                    config.eval.batch_size, config.model.text.context_length)
  # metrics.jsonl drops the lines past start_step (they are redone); TensorBoard; W&B with config.log.wandb_project
  writer = MetricWriter(workdir, resume_step=start_step, config=config)
  return TrainContext(
      config=config, workdir=workdir, checkpointer=checkpointer, mesh=mesh, objective=experiment.objective,
      schedule=experiment.schedule,
      data_iterator=data_iterator, record_stats=record_stats, step_fn=step_fn, step_rng=step_rng,
      eval_sets=eval_sets, encoder=encoder, writer=writer, start_step=start_step,
      last_step=min(config.total_steps, stop_at_step or config.total_steps), state=state,
      progress=Progress(config.total_steps, config.batch_size, start_step),
      last_eval=latest_eval(workdir) if start_step else {})


def switch_resolution(ctx: TrainContext, index: int) -> None:
  """Before batch `index`, the first of a new resolution stage (config.data.resolution_stages): the state resized
  to the stage's image size (training/stages.py: parameters, EMA, teacher and Adam's moments), and the objective,
  the compiled step and the encoder rebuilt for it; said in the log."""
  config = ctx.config
  old, new = stages.config_at(config, index - 1), stages.config_at(config, index)
  # the parts of batch `index`'s stage: those of a state after index + 1 updates (the config was validated at the start)
  experiment = Experiment.from_config(config, ctx.mesh, step=index + 1, validate=False)
  # on the devices: the other leaves stay where they are, and a state sharded over processes needs no gather
  state, resized = stages.resize_state(ctx.state, old.model.vision, new.model.vision)
  if ([np.shape(leaf) for leaf in jax.tree.leaves(state)]
      != [leaf.shape for leaf in jax.tree.leaves(experiment.state_shapes)]):
    raise ValueError(f'the train state resized to image size {new.model.vision.image_size} does not have the '
                     "stage's shapes")
  ctx.state = jax.device_put(state, experiment.state_shardings)
  ctx.objective = experiment.objective
  ctx.step_fn = experiment.compiled_step()
  ctx.encoder = Encoder(experiment.model, tower_variables(ctx.state.params, ctx.state.model_state), ctx.mesh,
                        config.eval.batch_size, config.model.text.context_length)
  print(f'Resolution stage from step {index + 1}: image size {old.model.vision.image_size} -> '
        f'{new.model.vision.image_size}; resized {resized} copies of visual/positional_embedding (the parameters, '
        "Adam's moments and any EMA or teacher copy)", flush=True)


def dispatch_step(ctx: TrainContext, step: int) -> dict[str, jax.Array]:
  """Take the next batch and dispatch train step `step`, without waiting for it (except the first step of the run,
  which compiles: it is waited for and kept out of the throughput figures). Returns its metrics, on the devices."""
  switched = stages.switches_at(ctx.config, step - 1)
  if switched:
    switch_resolution(ctx, step - 1)
  began = time.perf_counter()
  local_batch, status = pipeline.pop_status(next(ctx.data_iterator))
  ctx.record_stats.update(status)
  batch = parallel.global_batch(local_batch, ctx.mesh)
  ctx.progress.waited_for_data(time.perf_counter() - began)
  compiles = step == ctx.start_step + 1 or switched
  if compiles:  # the compilation can take minutes on a big model: say what is going on
    print(f'Compiling the train step (global batch {ctx.config.batch_size}) ...', flush=True)
  ctx.state, metrics = ctx.step_fn(ctx.state, batch, ctx.step_rng)
  if compiles:
    jax.block_until_ready(ctx.state)
    flops = getattr(ctx.step_fn, 'flops', None)
    # perf/mfu's denominator: config.log.peak_device_tflops, else the device's published bf16 peak (None: no MFU)
    peak = hardware.peak_device_flops(ctx.mesh.devices.flat[0].device_kind,
                                      ctx.config.log.peak_device_tflops) if flops else None
    # the architecture's FLOPs (perf/mfu) are traced only where an MFU is reported
    count_architecture = getattr(ctx.step_fn, 'architecture_flops', None)
    architecture = count_architecture(batch, ctx.step_rng) if peak and count_architecture else None
    ctx.progress = Progress(ctx.config.total_steps, ctx.config.batch_size, step, flops, ctx.mesh.size, peak,
                            architecture)
    peak_text = f'; MFU against {peak / 1e12:g} TFLOP/s per device' if peak else ''
    source = 'the traced matmuls' if ctx.mesh.devices.flat[0].platform == 'gpu' else 'XLA'  # flops.device_flops
    memory = getattr(ctx.step_fn, 'memory', None)
    memory_text = f'; {hardware.gib(memory)} of memory per device' if memory else ''
    architecture_text = f'; the architecture: {architecture / 1e9:.2f} GFLOP' if architecture else ''
    print(f'Compiled and ran step {step}' + (f' ({flops / 1e9:.2f} GFLOP per device, from {source}'
                                             f'{architecture_text}{peak_text}{memory_text}).' if flops else '.'),
          flush=True)
    if stages.stage_starts(ctx.config):  # each stage's program: what it costs to compile and to run
      seconds = getattr(ctx.step_fn, 'compile_seconds', None)
      print(f'Stage at image size {stages.size_at(ctx.config, step - 1)}: compiled in '
            + (f'{seconds:.1f} s' if seconds is not None else '? s')
            + (f', {flops / 1e9:.4g} GFLOP per step per device' if flops else ''), flush=True)
  return metrics


def train(ctx: TrainContext, hooks: list[Hook]) -> int:
  """Steps start_step + 1 ... last_step, each dispatched and then handed to every hook in order (a hook reading a
  step's metrics waits for it, so the guard reads step n's only after step n + 1 is dispatched). Returns the last
  step done; a hook stops the run by raising."""
  step = ctx.start_step
  for step in range(ctx.start_step + 1, ctx.last_step + 1):
    metrics = dispatch_step(ctx, step)
    for hook in hooks:
      hook.after_step(ctx, step, metrics)
  return step


def path_not_found(key: str, path: str) -> str | None:
  """Why the file or folder `path` (local or on an object store), named by config `key`, cannot be used: it does
  not exist, or its object store's client is not installed; None when it exists."""
  try:
    return None if paths.exists(path) else f"{key}='{path}' does not exist"
  except ImportError as error:  # fsspec: 'Install gcsfs to access Google Storage'
    return f"{key}='{path}' cannot be checked: {error}"


def files_not_found(config: ml_collections.ConfigDict) -> list[str]:
  """One line for each file or folder the config names that does not exist, local or on an object store, and for
  an init.checkpoint on an object store orbax cannot read (s3://)."""
  problem = config.init.checkpoint and paths.checkpoint_location_problem(config.init.checkpoint)
  named = {'config.data.teacher_embeddings': config.data.teacher_embeddings,
           'config.init.checkpoint': '' if problem else config.init.checkpoint}
  missing = [line for key, path in named.items() if path and (line := path_not_found(key, path))]
  return missing + ([f"config.init.checkpoint='{config.init.checkpoint}': {problem}"] if problem else [])


def check_config_and_inputs(config: ml_collections.ConfigDict) -> list[str]:
  """Validate the config, then look for every input it needs, listing all that are missing at once (not one per
  attempt): DataNotFoundError with each problem and its fix. Returns the training shards."""
  missing, paths = [], []
  try:
    config_lib.validate(config, num_devices=jax.device_count())
  except errors.MissingInputError as error:  # every other check has passed
    missing.extend(error.messages)
  try:
    paths = formats.train_paths(config.data)
  except errors.DataNotFoundError as error:
    missing.append(str(error))
  missing.extend(files_not_found(config))
  missing.extend(evalsets.missing_inputs(config))  # eval sets' folders: found now, not after compiling
  if len(missing) == 1:
    raise errors.DataNotFoundError(missing[0])
  if missing:
    raise errors.DataNotFoundError(f'this run needs {len(missing)} inputs it does not have:\n'
                                   + '\n'.join(f'{i}. {text}' for i, text in enumerate(missing, 1)))
  return paths


def remove_if_empty(directory: str) -> None:
  """Remove `directory` when it exists and is empty (made for checkpoints that a failed start never wrote). An object
  store has no empty folders: nothing to do there."""
  if paths.is_remote(directory):
    return
  if os.path.isdir(directory) and not os.listdir(directory):
    os.rmdir(directory)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, stop_at_step: int | None = None
                       ) -> dict[str, Any]:
  """Train to `config.total_steps` (or until `stop_at_step`, saving a checkpoint there), evaluating and
  checkpointing on the way. Resumes from the latest checkpoint in `workdir`.

  Returns {'state': the final TrainState (None if training had already finished), 'eval': the last eval metrics,
  'step': the last step}.
  """
  began = time.perf_counter()  # the wall time in the end summary
  check_backends(config)  # config.log.wandb_project without wandb installed: says how to install it
  paths = check_config_and_inputs(config)
  start_checks.check_start(config, paths)  # the tokenizer and a few records against the model and objective
  guards.check_workdir_writable(workdir)  # and so does a read-only or full workdir
  checkpointer = Checkpointer(workdir, keep=config.checkpoint.keep, async_save=config.checkpoint.async_save)
  latest = checkpointer.latest_complete_step()  # a torn newest checkpoint is moved aside, not loaded
  if latest is not None and latest >= config.total_steps:
    results = report_finished(workdir, latest, config.total_steps)
    checkpointer.close()
    return {'state': None, 'eval': results, 'step': latest}

  try:
    ctx = build_context(config, workdir, paths, checkpointer, latest, stop_at_step)
  except BaseException:  # bad data found while indexing, a wrong teacher file, ...: leave no empty checkpoints/
    checkpointer.close()
    remove_if_empty(checkpointer.directory)
    raise
  try:
    # The watchdog is the last hook: a step is done once every hook has run (training/watchdog.py).
    with guards.PreemptionWatcher() as watcher, StepWatchdog(config, ctx.start_step, ctx.last_step) as dog:
      step = train(ctx, [*default_hooks(ctx, watcher), dog])
    curves = plot_curves(workdir) if jax.process_index() == 0 else None
    if curves:  # the end-of-run plot, also as an image to the writer's backends (TensorBoard, W&B)
      ctx.writer.write_images(step, {'plots/curves': curves})
  finally:  # every way out (done, preempted, non-finite, an error) closes the files
    ctx.close()
    remove_if_empty(checkpointer.directory)  # a start that failed (a step too big to fit) leaves no empty folder
  if step >= config.total_steps:  # scores against chance, the checkpoint, the time taken and what to run next
    print(end_summary(ctx.last_eval, step, config.eval.split, ctx.checkpointer.step_directory(step),
                      time.perf_counter() - began, curves), flush=True)
  elif curves:
    print(f'Training curves: {curves}', flush=True)
  return {'state': ctx.state, 'eval': ctx.last_eval, 'step': step}
