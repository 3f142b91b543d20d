#!/usr/bin/env python
"""Train-step and input-pipeline throughput of a config, measured in one run; prints one JSON object.

The ratio `pipeline_headroom` = pipeline samples/s / train-step samples/s says whether data loading can keep up
(> 1 means the step, not the data, is the bottleneck).

python benchmarks/train_throughput.py [--config=configs/clip_shapes.py] [--steps=20]
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The speed setting of the CPU trainer (`python -m vlp_jax.main` sets it too), before jax starts its threads;
# VLP_JAX_MALLOC=default measures without it.
from vlp_jax.cli import allocator  # noqa: E402

allocator.retain_freed_memory()

import jax  # noqa: E402
from absl import app, flags  # noqa: E402

from vlp_jax import config as config_lib, parallel  # noqa: E402
from vlp_jax.data import formats
from vlp_jax.data.loading import pipeline  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402

_CONFIG = config_lib.define_config_flag('configs/clip_shapes.py', 'Config file.')
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps (after one warm-up step).')


def main(argv):
  del argv
  run = Experiment.from_config(_CONFIG.value)
  config, mesh = run.config, run.mesh
  state = run.init_state(jax.random.key(0))
  step_fn = run.compiled_step()
  iterator = pipeline.train_iterator(formats.train_paths(config.data), run.views, pipeline.PipelineSettings(seed=0,
                                     global_batch_size=config.batch_size, process_index=0, process_count=1))
  began = time.perf_counter()
  host_batches = [pipeline.pop_status(next(iterator))[0] for _ in range(_STEPS.value + 1)]
  pipeline_rate = len(host_batches) * config.batch_size / (time.perf_counter() - began)
  batches = [parallel.global_batch(b, mesh) for b in host_batches]
  rng = jax.random.key(1)
  began = time.perf_counter()
  state, _ = step_fn(state, batches[0], rng)
  jax.block_until_ready(state)
  compile_seconds = time.perf_counter() - began
  began = time.perf_counter()
  for batch in batches[1:]:
    state, metrics = step_fn(state, batch, rng)
  jax.block_until_ready(state)
  step_seconds = (time.perf_counter() - began) / _STEPS.value
  print(json.dumps({
      'benchmark': 'train_throughput', 'model': config.model.name, 'batch_size': config.batch_size,
      'devices': jax.device_count(), 'platform': jax.devices()[0].platform, 'machine': platform.processor(),
      'cpus': os.cpu_count(), 'compile_seconds': round(compile_seconds, 2),
      'step_seconds': round(step_seconds, 4), 'train_samples_per_sec': round(config.batch_size / step_seconds, 1),
      'pipeline_samples_per_sec': round(pipeline_rate, 1),
      'pipeline_headroom': round(pipeline_rate * step_seconds / config.batch_size, 2)}))


if __name__ == '__main__':
  app.run(main)
