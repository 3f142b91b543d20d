#!/usr/bin/env python
"""The MFU of stored GPU rows in both conventions, recomputed from their step times and shapes (benchmarks/RESULTS.md):

  python benchmarks/mfu_table.py benchmarks/results/gpu/2026-11-26_h200_session4/*.jsonl \
      benchmarks/results/gpu/2026-11-26_h200_session5/*.jsonl

For every row with a step time (train_step.py's, and both sides of vs_open_clip.py's) it traces, on the CPU and
without compiling, the same model, objective and batch size twice: with every row through every block (the
architecture's FLOPs, `training.flops.architecture_config`, what `mfu` and the trainer's perf/mfu count) and as
vlp_jax executes it (the pooled last block; attention counted on the true rows through XLA's route, so a 'cudnn' row,
whose fused kernel the jaxpr count cannot see, is counted like an 'xla' one). MFU is FLOPs per step / step seconds /
the device's published bf16 peak (vlp_jax/hardware.py). open_clip computes every row of every block, so its executed
FLOPs are the architecture's. One markdown table on stdout.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import jax  # noqa: E402

from benchmarks.common import build_config, real_batch  # noqa: E402
from vlp_jax import hardware, parallel  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402
from vlp_jax.training.flops import architecture_config, traced_flops  # noqa: E402

GPU_PEAK_DEVICE = 'NVIDIA H200'  # vs_open_clip rows name the platform only ('gpu'): the stored runs' H200


def traced_step_flops(config, batch: dict) -> float:
  """The matmul FLOPs of one train step of `config` on `batch` (shapes), from its jaxpr."""
  run = Experiment.from_config(config, parallel.make_mesh(1, jax.devices()[:1]))
  return traced_flops(run.traced_step(batch, jax.random.key(0)))


def step_flops(row: dict) -> tuple[float, float]:
  """(architecture, executed) FLOPs of one train step of `row`'s setting."""
  config = build_config(row['model'], row['batch_size'], row.get('objective', 'clip'), row['precision'],
                        bool(row.get('remat', False)), float(row.get('patch_dropout', 0.0)),
                        bool(row.get('scan_layers', False)), 'xla')
  batch = {k: jax.ShapeDtypeStruct((row['batch_size'], *v.shape[1:]), v.dtype)
           for k, v in real_batch(config, 1).items()}
  architecture = architecture_config(config)
  executed = architecture_config(config)
  executed.model.update(pool_last_block=True, remat=config.model.remat)
  return traced_step_flops(architecture, batch), traced_step_flops(executed, batch)


def timed_sides(row: dict) -> list[tuple[str, float, str]]:
  """[(side, step seconds, what was stored as its MFU)] of a stored row; [] for a row without a step time."""
  if 'step_seconds' in row:
    stored = row.get('mfu')
    flags = f", XLA flags: {row['xla_flags_variant']}" if 'xla_flags_variant' in row else ''
    return [(row.get('attention', '') + flags, row['step_seconds'], '' if stored is None else f'{stored:.3f}')]
  if 'vlp_jax_samples_per_sec' in row:
    return [(f"vlp_jax ({row['attention']})", row['batch_size'] / row['vlp_jax_samples_per_sec'], ''),
            ('open_clip', row['batch_size'] / row['open_clip_samples_per_sec'], '')]
  return []


def main(paths: list[str]) -> None:
  counted: dict = {}
  print('| file | model, objective | batch | side / attention | step s | TFLOP per step: architecture / executed '
        '| MFU: architecture / executed | stored `mfu` |')
  print('|---|---|---|---|---|---|---|---|')
  for path in paths:
    with open(path) as f:
      rows = [json.loads(line) for line in f if line.startswith('{')]
    for row in rows:
      sides = timed_sides(row)
      if not sides:
        continue
      key = tuple(row.get(k) for k in ('model', 'batch_size', 'objective', 'precision', 'remat', 'patch_dropout',
                                       'scan_layers'))
      if key not in counted:
        counted[key] = step_flops(row)
      architecture, executed = counted[key]
      device = row['device'] if row['device'] != 'gpu' else GPU_PEAK_DEVICE
      peak = hardware.peak_flops(device)
      for side, seconds, stored in sides:
        side_executed = architecture if side == 'open_clip' else executed
        print(f"| {os.path.relpath(path, 'benchmarks/results/gpu')} | {row['model']}, {row.get('objective', 'clip')} "
              f"| {row['batch_size']} | {side} | {seconds:.4f} | {architecture / 1e12:.2f} / {side_executed / 1e12:.2f} "
              f"| {architecture / seconds / peak:.3f} / {side_executed / seconds / peak:.3f} | {stored} |", flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])
