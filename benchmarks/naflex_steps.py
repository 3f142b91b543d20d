#!/usr/bin/env python
"""What SigLIP 2's NaFlex stage compiles and what each program costs: one JSON line per train-step program (the
square-image step before the NaFlex switch, then one per sequence length of config.data.naflex.sequence_lengths)
with its compile seconds and median step seconds, then one per eval budget of config.eval.naflex_max_patches with
the compile seconds of its image-embedding program and its seconds per eval batch.

  python benchmarks/naflex_steps.py --config=configs/siglip2_shapes.py:naflex --steps=3

The batches are real: the objective's views of the configured training data, drawn for a step before the switch
and for steps of the NaFlex stage (a batch's budget is set by its step; the steps are chosen so that each length
comes once). The step runs on one device. The late losses are off in the square-image program (the flag as at
step 0), as before the self-distillation switch.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vlp_jax.cli import allocator  # noqa: E402

allocator.retain_freed_memory()

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from vlp_jax import objectives, parallel  # noqa: E402
from vlp_jax.config import define_config_flag  # noqa: E402
from vlp_jax.data import formats  # noqa: E402
from vlp_jax.data.loading import pipeline
from vlp_jax.data.image.naflex_stage import batch_sequence_length  # noqa: E402
from vlp_jax.evaluation import Encoder  # noqa: E402
from vlp_jax.evaluation.naflex_budgets import BudgetEncoder  # noqa: E402
from vlp_jax.objectives.base import tower_variables  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402

_CONFIG = define_config_flag('configs/siglip2_shapes.py:naflex')
_STEPS = flags.DEFINE_integer('steps', 3, 'Timed steps per program (after the first, which compiles).')


def _batches(config, views, steps: list[int]) -> list[dict]:
  """The global batches of train steps `steps`: the views of the first batch_size training records, each example
  told the step (so the square image before the NaFlex switch, patches at the step's budget after it)."""
  source = grain.sources.ArrayRecordDataSource(formats.train_paths(config.data))
  decode = pipeline.DecodeRecord()
  examples = [decode.map(source[i]) for i in range(config.batch_size)]
  out = []
  for step in steps:
    rows = [views.random_map({**example, pipeline.STEP_KEY: step}, np.random.default_rng([step, i]))
            for i, example in enumerate(examples)]
    out.append(views.fill_batch({k: np.stack([row[k] for row in rows]) for k in rows[0]}))
  return out


def main(argv):
  del argv
  run = Experiment.from_config(_CONFIG.value, parallel.make_mesh(1, jax.devices()[:1]))
  config, mesh = run.config, run.mesh
  objective_cls = objectives.OBJECTIVES.get(config.objective.name)
  options = objective_cls.options(config.objective)
  naflex_from = objective_cls.naflex_step(options, config.total_steps)
  if naflex_from is None:
    raise SystemExit('the config has no NaFlex stage (config.objective.naflex_start_fraction = 1)')
  lengths = tuple(config.data.naflex.sequence_lengths)
  steps, seen = [0], set()
  for step in range(naflex_from, config.total_steps):  # the first step of the stage that draws each length
    length = batch_sequence_length(config.seed, step, lengths)
    if length not in seen:
      seen.add(length)
      steps.append(step)
  batches = _batches(config, run.views, steps)
  state = run.init_state(jax.random.key(0))
  step_fn = run.compiled_step()
  for step, batch in zip(steps, batches):
    device_batch = parallel.global_batch(batch, mesh)
    began = time.perf_counter()
    state, metrics = step_fn(state, device_batch, jax.random.key(1))
    jax.block_until_ready(state)
    compile_seconds = time.perf_counter() - began
    times = []
    for _ in range(_STEPS.value):
      began = time.perf_counter()
      state, metrics = step_fn(state, device_batch, jax.random.key(1))
      jax.block_until_ready(state)
      times.append(time.perf_counter() - began)
    patches = batch.get('image_patches')
    print(json.dumps({'program': 'train_step', 'sequence_length': None if patches is None else patches.shape[1],
                      'batch_size': config.batch_size, 'compile_and_first_step_s': round(compile_seconds, 2),
                      'step_s': round(statistics.median(times), 4), 'programs': len(step_fn.compiled)}), flush=True)
  encoder = Encoder(run.model, tower_variables(state.params, state.model_state), mesh, config.eval.batch_size,
                    config.model.text.context_length)
  images = np.random.default_rng(0).normal(size=(config.eval.batch_size, config.model.vision.image_size,
                                                 config.model.vision.image_size, 3)).astype(np.float32)
  for budget in config.eval.naflex_max_patches:
    budget_encoder = BudgetEncoder(encoder, int(budget), config.model.vision.patch_size,
                                   run.objective.preprocessing)
    began = time.perf_counter()
    budget_encoder.images(images)
    first = time.perf_counter() - began
    times = []
    for _ in range(_STEPS.value):
      began = time.perf_counter()
      budget_encoder.images(images)
      times.append(time.perf_counter() - began)
    print(json.dumps({'program': 'eval_images', 'max_patches': int(budget), 'batch_size': config.eval.batch_size,
                      'compile_and_first_batch_s': round(first, 2), 'batch_s': round(statistics.median(times), 4)}),
          flush=True)


if __name__ == '__main__':
  app.run(main)
