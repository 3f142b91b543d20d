#!/usr/bin/env python
"""XLA flags as a speed lever: train_step.py run under each set of flags, a separate process per run, in alternating
rounds.

python benchmarks/xla_flags.py --rounds=2 --variant=default \
    --variant=--xla_gpu_enable_latency_hiding_scheduler=true --variant=--xla_gpu_enable_command_buffer= \
    -- --model=ViT-B-16 --precision=bf16 --batch_size=256 --attention=cudnn --steps=10 --warmup=3

XLA reads its flags once, when the backend starts, so each variant needs a process of its own: the arguments after
`--` go to benchmarks/train_step.py, run once per variant per round with the variant's flags appended to $XLA_FLAGS
('default' appends none). Rounds alternate the order (A B C, then C B A, ...) so that the machine's drift hits every
variant alike. Prints each run's train_step.py rows as they come (with `xla_flags_variant` and `round`), then one
summary line per variant and row: its median samples/s over the rounds and, within each round, its samples/s over
the first variant's (`ratio_vs_first`: median, min, max). A variant whose run fails (a flag this XLA does not know, a
compile that outlasts --run_timeout) gets a line saying so, and the others go on.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

from benchmarks.common import alternating_order, ratio_range  # noqa: E402
TRAIN_STEP = os.path.join(ROOT, 'benchmarks', 'train_step.py')

_VARIANTS = flags.DEFINE_multi_string('variant', ['default'], "XLA flags appended to $XLA_FLAGS for one variant "
                                      "(repeat the flag for several; 'default': none). The first is the reference.")
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Alternating rounds; each runs every variant once.', lower_bound=1)
_RUN_TIMEOUT = flags.DEFINE_integer('run_timeout', 300, 'Seconds one run of train_step.py may take.', lower_bound=1)


def summarise(rows: list[dict], variants: list[str]) -> list[dict]:
  """rows: train_step.py rows with `xla_flags_variant`, `round` and `index` (the row's place in its run's output) ->
  one line per (variant, index): median samples/s over rounds and samples/s over the first variant's within each
  round (`ratio_vs_first`, where the first variant has a row of that index in that round)."""
  timed = {(r['xla_flags_variant'], r['index'], r['round']): r['samples_per_sec'] for r in rows
           if 'samples_per_sec' in r}
  out = []
  for variant in variants:
    for index in sorted({i for v, i, _ in timed if v == variant}):
      rounds = sorted(k for v, i, k in timed if (v, i) == (variant, index))
      rates = [timed[variant, index, k] for k in rounds]
      line = {'benchmark': 'xla_flags', 'xla_flags_variant': variant, 'index': index, 'rounds': len(rates),
              'samples_per_sec_median': round(statistics.median(rates), 2), 'round_samples_per_sec': rates}
      ratios = [timed[variant, index, k] / timed[variants[0], index, k] for k in rounds
                if (variants[0], index, k) in timed]
      if variant != variants[0] and ratios:
        line['ratio_vs_first'] = {**ratio_range(ratios), 'first': variants[0]}
      out.append(line)
  return out


def run_variant(variant: str, round_index: int, step_args: list[str]) -> list[dict]:
  """train_step.py's rows for one run under `variant`'s flags, each marked with the variant, the round and its
  index; a failed run gives one row with `failed`."""
  env = dict(os.environ)
  if variant != 'default':
    env['XLA_FLAGS'] = f"{env.get('XLA_FLAGS', '')} {variant}".strip()
  mark = {'xla_flags_variant': variant, 'round': round_index}
  try:
    result = subprocess.run([sys.executable, TRAIN_STEP, *step_args], env=env, cwd=ROOT, capture_output=True,
                            text=True, timeout=_RUN_TIMEOUT.value)
  except subprocess.TimeoutExpired:
    return [{**mark, 'index': 0, 'failed': f'train_step.py did not finish within {_RUN_TIMEOUT.value} s'}]
  rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]
  if result.returncode != 0 or not rows:
    return [{**mark, 'index': 0, 'failed': f'exit {result.returncode}: {result.stderr[-1500:]}'}]
  return [{**row, **mark, 'index': index} for index, row in enumerate(rows)]


def main(argv):
  step_args = argv[1:]
  variants = _VARIANTS.value
  if len(set(variants)) != len(variants):
    raise app.UsageError(f'--variant is given twice with the same flags: {variants}')
  rows = []
  for round_index in range(_ROUNDS.value):
    for variant in alternating_order(variants, round_index):
      for row in run_variant(variant, round_index, step_args):
        rows.append(row)
        print(json.dumps(row), flush=True)
  for line in summarise(rows, variants):
    print(json.dumps(line), flush=True)


if __name__ == '__main__':
  app.run(main)
