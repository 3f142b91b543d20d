#!/usr/bin/env python
"""What multi-crop augmentation in the train step (config.data.augment_on='device', data/image/device_augment.py) adds
to the step: one JSON line per section.

  python benchmarks/device_augment.py [--config=configs/cosmos_shapes.py] [--rounds=5] [--steps=5]

step:   the config's train step (its model, batch size and views) compiled twice, with the views made on the host
        and with them rendered in the step from one source image per example (`--device_source_size`, 0: the
        model's image size), timed in --rounds alternating rounds (median of --steps steps each): the step times and
        `device_over_host`, the per-round ratio (median, min, max), in wall seconds and (`_cpu`) in CPU seconds of
        the process, the figure that holds on a shared machine.
render: the rendering alone at COSMOS's full scale (2 global 224px + 6 local 96px crops from a 256px source, the
        default options), per sample, in a batch of --render_batch (wall and CPU milliseconds): what the step
        gains on top of the towers.
The batch is real: the objective's views of embedded-dataset examples (benchmarks/common.real_batch).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vlp_jax.cli import allocator  # noqa: E402

allocator.retain_freed_memory()  # the CPU trainer's setting, before jax starts

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import alternating_order, ratio_range, real_batch  # noqa: E402
from vlp_jax import objectives, parallel  # noqa: E402
from vlp_jax.config import base_config, from_file, validate  # noqa: E402
from vlp_jax.data.image import device_augment  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402

_CONFIG = flags.DEFINE_string('config', 'configs/cosmos_shapes.py', 'Config file of the step (COSMOS or SLIP).')
_SOURCE = flags.DEFINE_integer('device_source_size', 0, 'config.data.device_source_size (0: the image size).')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Alternating timing rounds.')
_STEPS = flags.DEFINE_integer('steps', 5, 'Timed steps per round and variant.')
_RENDER_BATCH = flags.DEFINE_integer('render_batch', 32, 'Samples per call of the full-scale rendering (0: skip).')


def median_seconds(fn, repeats: int) -> tuple[float, float]:
  """(median wall seconds, median CPU seconds of this process's threads) of `fn()`, which blocks until done. The
  CPU time is the figure that holds on a shared machine: XLA's CPU threads are this process's."""
  wall, cpu = [], []
  for _ in range(repeats):
    began, cpu_began = time.perf_counter(), time.process_time()
    fn()
    wall.append(time.perf_counter() - began)
    cpu.append(time.process_time() - cpu_began)
  return statistics.median(wall), statistics.median(cpu)


def compiled_step(config: ml_collections.ConfigDict):
  """-> a function running one train step of `config` on its real batch to completion, and the compile seconds."""
  device = jax.devices()[0]
  run = Experiment.from_config(config, parallel.make_mesh(1, [device]))
  state = jax.device_put(run.init_state(jax.random.key(0)), device)
  batch = jax.device_put(real_batch(config, config.batch_size), device)
  rng = jax.random.key(1)
  began = time.perf_counter()
  compiled = jax.jit(run.train_step, donate_argnums=0).lower(state, batch, rng).compile()
  seconds = time.perf_counter() - began

  def step():
    nonlocal state
    state, metrics = compiled(state, batch, rng)
    jax.block_until_ready(metrics)

  step()  # warm-up
  return step, seconds


def step_section(path: str) -> dict:
  host = from_file(path)
  device = host.copy_and_resolve_references()
  device.data.augment_on = 'device'
  device.data.device_source_size = _SOURCE.value or host.model.vision.image_size
  validate(device, num_devices=1)
  steps = {}
  compile_seconds = {}
  for name, config in (('host', host), ('device', device)):
    steps[name], compile_seconds[name] = compiled_step(config)
  wall, cpu = {name: [] for name in steps}, {name: [] for name in steps}
  for round_index in range(_ROUNDS.value):
    for name in alternating_order(steps, round_index):
      seconds, cpu_seconds = median_seconds(steps[name], _STEPS.value)
      wall[name].append(seconds)
      cpu[name].append(cpu_seconds)
  return {'section': 'step', 'config': path, 'batch_size': host.batch_size,
          'device_source_size': device.data.device_source_size, 'platform': jax.devices()[0].platform,
          **{f'{name}_step_seconds': round(statistics.median(t), 4) for name, t in wall.items()},
          **{f'{name}_step_cpu_seconds': round(statistics.median(t), 4) for name, t in cpu.items()},
          **{f'{name}_compile_seconds': round(s, 1) for name, s in compile_seconds.items()},
          'device_over_host': ratio_range([d / h for d, h in zip(wall['device'], wall['host'])]),
          'device_over_host_cpu': ratio_range([d / h for d, h in zip(cpu['device'], cpu['host'])])}


def render_section(batch_size: int) -> dict:
  """COSMOS's default views at full scale, rendered from `batch_size` 256px sources."""
  from sklearn.datasets import load_sample_images
  config = base_config()
  config.objective = ml_collections.ConfigDict({'name': 'cosmos'})
  config.model.vision.image_size = 224
  config.data.augment_on, config.data.device_source_size = 'device', 256
  sizes = objectives.OBJECTIVES.get('cosmos').device_view_sizes(config)
  views = objectives.OBJECTIVES.get('cosmos').views(config)
  photo = load_sample_images().images[0]
  rng = np.random.default_rng(0)
  rows = [views.image_views(photo, rng) for _ in range(batch_size)]
  batch = jax.device_put({k: np.stack([r[k] for r in rows]) for k in rows[0]})
  render = jax.jit(lambda b: device_augment.render_batch(b, sizes))
  jax.block_until_ready(render(batch))
  timed = [median_seconds(lambda: jax.block_until_ready(render(batch)), 3) for _ in range(_ROUNDS.value)]
  return {'section': 'render', 'views': {k: [v.shape[1], sizes[k[:-len(device_augment.PARAMS_SUFFIX)]]]
                                         for k, v in batch.items() if k.endswith(device_augment.PARAMS_SUFFIX)},
          'source_size': 256, 'batch_size': batch_size, 'platform': jax.devices()[0].platform,
          'ms_per_sample': round(1e3 * statistics.median(t[0] for t in timed) / batch_size, 3),
          'cpu_ms_per_sample': round(1e3 * statistics.median(t[1] for t in timed) / batch_size, 3)}


def main(argv):
  del argv
  print(json.dumps(step_section(_CONFIG.value)), flush=True)
  if _RENDER_BATCH.value:
    print(json.dumps(render_section(_RENDER_BATCH.value)), flush=True)


if __name__ == '__main__':
  app.run(main)
