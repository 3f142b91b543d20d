"""Issue 64, ZeroVL's stall: the decisive experiment declared in docs/evidence.md ("The learning-curve protocol",
"ZeroVL's stall"), run as declared.

Sampler (mixed, single_source) x data (the three sources; studio alone; web alone) x development seeds 0, 1, 2: 18
runs of lab/experiments/clip_zerovl_temperature.py (the control's CLIP loss, temperature initialised at 0.02; no
mixup, no text augmentation), 200 steps of that config's 400-step schedule (`--stop_at_step`, so the learning rate
follows the runs in which the stall was seen), logging every 10 steps the loss, the logit scale and the within-batch
mean similarity of the image and of the text embeddings (`config.log.batch_similarity`).

Sources A and B, chosen before any run: studio and web, the two photo-like sources (sketch draws outlines); if either
alone stalls under both samplers, the stall is the data's. Each run's rows go to
lab/results/diagnostics/2026-11-29_zerovl_stall/<cell>_seed<k>.jsonl; a run whose file holds step 200 is
skipped (resumable). Then it prints the reading (below) and draws loss_vs_step.png there.

The reading. A cell's run "leaves chance" at the first logged step whose loss is below the cell's chance level minus
MARGIN (one margin for all cells, fixed before the first run). Chance levels, for a batch of B pairs:
  - single-source batches: every other pair of the batch is as likely: log(B).
  - mixed batches whose sources come in proportions p_s: a model that only tells sources apart spreads each row over
    the B p_s pairs of its source, so its loss is sum_s p_s log(B p_s) = log(B) - H(p), H the entropy of p (in nats).
    The proportions are the train split's source sizes (the synthetic set has num_train examples per source), which
    a mixed batch draws from in expectation: three equal sources give log(128) - log(3) = 3.75; one source gives
    log(B), the same as single-source batches.
Sanity (declared): with one source the two samplers must draw the same batches, hence the same losses; it prints
the largest loss gap between the samplers on studio alone and on web alone. Found at the first runs: they do not.
Both draw the same examples (one pass over the source before any repeats) in different orders: 'mixed' shuffles all
records with the run's seed (data/loading/pipeline.py), 'single_source' shuffles each source with a seed derived from
(seed, source index) (data/loading/mixing.py `source_datasets`), so with one source the first batches share ~1 example
in
128. The gap is then a data-order gap, read against the gap between seeds.

python lab/diagnostics/zerovl_stall.py            # runs what is missing (about 1 min a run on 2 CPU cores), then reads
python lab/diagnostics/zerovl_stall.py --read     # reads only
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from matplotlib.figure import Figure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, 'lab', 'results', 'diagnostics', '2026-11-29_zerovl_stall')
CONFIG = os.path.join(ROOT, 'lab', 'experiments', 'clip_zerovl_temperature.py')
SAMPLERS = ('mixed', 'single_source')
DATA = {'three': ('studio', 'web', 'sketch'), 'studio': ('studio',), 'web': ('web',)}
SEEDS = (0, 1, 2)
STEPS = 200
LOG_EVERY = 10
BATCH = 128  # the config's batch_size (checked in run_one)
MARGIN = 0.3  # nats below a cell's chance level: fixed before the first run
KEYS = ('loss', 'logit_scale', 'image_batch_similarity', 'text_batch_similarity')


def chance_level(sampler: str, proportions: list[float], batch: int) -> float:
  """The loss of a model that knows nothing but each pair's source: log(batch) for single-source batches, and
  log(batch) - H(proportions) for mixed batches whose sources come in these proportions (nats)."""
  if sampler == 'single_source':
    return math.log(batch)
  p = np.asarray(proportions, np.float64) / np.sum(proportions)
  entropy = -float(np.sum(p[p > 0] * np.log(p[p > 0])))
  return math.log(batch) - entropy


def first_below(rows: list[dict], threshold: float) -> int | None:
  """The first logged step whose loss is below threshold, or None if none is."""
  return next((row['step'] for row in rows if row['loss'] < threshold), None)


def max_gap(a: list[dict], b: list[dict]) -> float:
  """The largest |loss difference| at the steps two runs both logged (nan if they share none)."""
  return max((abs(x['loss'] - y['loss']) for x, y in zip(a, b)), default=float('nan'))


def run_name(sampler: str, data: str, seed: int) -> str:
  return f'{sampler}_{data}_seed{seed}'


def read_rows(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def train_rows(metrics_path: str) -> list[dict]:
  """The logged train rows of a workdir's metrics.jsonl: {'step', 'loss', 'logit_scale', similarities}."""
  rows = []
  for row in read_rows(metrics_path):
    if 'train/loss' in row:
      rows.append({'step': row['step'], **{key: row[f'train/{key}'] for key in KEYS}})
  return rows


def run_one(sampler: str, data: str, seed: int, out: str, steps: int = STEPS, extra: tuple[str, ...] = ()) -> str:
  """Trains one run unless its rows file already reaches `steps`; returns that file's path."""
  path = os.path.join(out, run_name(sampler, data, seed) + '.jsonl')
  rows = read_rows(path)
  if rows and rows[-1]['step'] >= steps:
    return path
  sources = '(' + ''.join(f"'{s}'," for s in DATA[data]) + ')'
  workdir = tempfile.mkdtemp(prefix='zerovl_stall_')
  command = [sys.executable, '-m', 'vlp_jax.main', f'--config={CONFIG}', f'--workdir={workdir}',
             f'--stop_at_step={steps}', f'--config.seed={seed}', f'--config.data.mixing={sampler}',
             f'--config.data.synthetic.sources={sources}', f'--config.log_every_steps={LOG_EVERY}',
             '--config.log.batch_similarity=True', '--config.eval.tasks=()', "--config.eval.datasets=('synthetic',)", f'--config.batch_size={BATCH}',
             *extra]
  try:
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    rows = train_rows(os.path.join(workdir, 'metrics.jsonl'))
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  os.makedirs(out, exist_ok=True)
  with open(path, 'w') as f:
    f.writelines(json.dumps(row) + '\n' for row in rows)
  return path


def cell_chance(sampler: str, data: str) -> float:
  return chance_level(sampler, [1.0] * len(DATA[data]), BATCH)  # equal source sizes: num_train per source


def read(out: str) -> None:
  runs = {(s, d, k): read_rows(os.path.join(out, run_name(s, d, k) + '.jsonl'))
          for s in SAMPLERS for d in DATA for k in SEEDS}
  print('Sanity: with one source the two samplers should draw the same batches. Max |loss gap| over the logged '
        'steps, between the samplers at one seed, and (for scale) between seeds 0 and k of single_source:')
  for data in ('studio', 'web'):
    for seed in SEEDS:
      a, b = runs['mixed', data, seed], runs['single_source', data, seed]
      base = runs['single_source', data, 0]
      print(f'  {data:6s} seed {seed}: samplers {max_gap(a, b):.3g}; seeds 0 and {seed}: {max_gap(base, b):.3g}')
  print(f'\nFirst logged step with loss < chance - {MARGIN} (None: not within {STEPS} steps; -: not run)')
  print(f'{"sampler":14s} {"data":7s} {"chance":>7s} ' + ' '.join(f'seed{k:<3d}' for k in SEEDS)
        + '  loss@200 (mean)')
  for sampler in SAMPLERS:
    for data in DATA:
      chance = cell_chance(sampler, data)
      firsts = [first_below(runs[sampler, data, k], chance - MARGIN) if runs[sampler, data, k] else '-'
                for k in SEEDS]  # '-': not run
      last = [r[-1]['loss'] for r in (runs[sampler, data, k] for k in SEEDS) if r]
      print(f'{sampler:14s} {data:7s} {chance:7.3f} ' + ' '.join(f'{str(f):7s}' for f in firsts)
            + f'  {np.mean(last) if last else float("nan"):.3f}')
  plot(runs, os.path.join(out, 'loss_vs_step.png'))


def plot(runs: dict, path: str) -> None:
  """Loss against step, a panel per cell: each seed thin, their mean thick, the chance level and chance - MARGIN."""
  figure = Figure(figsize=(12, 6.5))
  axes = figure.subplots(len(SAMPLERS), len(DATA), sharex=True, sharey=True)
  for i, sampler in enumerate(SAMPLERS):
    for j, data in enumerate(DATA):
      ax = axes[i, j]
      series = [runs[sampler, data, k] for k in SEEDS if runs[sampler, data, k]]
      for seed, rows in zip(SEEDS, series):
        ax.plot([r['step'] for r in rows], [r['loss'] for r in rows], lw=0.8, alpha=0.6, label=f'seed {seed}')
      if series:
        size = min(len(r) for r in series)
        ax.plot([r['step'] for r in series[0][:size]], np.mean([[r['loss'] for r in s[:size]] for s in series], 0),
                lw=2.2, color='k', label='mean')
      chance = cell_chance(sampler, data)
      ax.axhline(chance, color='r', ls='--', lw=1, label=f'chance {chance:.2f}')
      ax.axhline(chance - MARGIN, color='r', ls=':', lw=1, label=f'chance - {MARGIN}')
      ax.set_title(f'{sampler}, {data}', fontsize=10)
      if i == len(SAMPLERS) - 1:
        ax.set_xlabel('step')
      if j == 0:
        ax.set_ylabel('train loss (nats)')
      ax.legend(fontsize=7)
  figure.suptitle('ZeroVL stall (issue 64): CLIP loss, temperature 0.02 at init, 200 of 400 steps, batch 128')
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  print(f'\nPlot: {path}')


def run_order() -> list[tuple[str, str, int]]:
  """All 18 runs, ordered so that a part is already readable: seed 0's six cells, then for seeds 1 and 2 the four
  distinct conditions (three sources under each sampler, each source alone single-source), then the one-source
  mixed runs, which the sanity condition says repeat the single-source ones."""
  first = [(sampler, data, 0) for data in DATA for sampler in SAMPLERS]
  distinct = [run for seed in SEEDS[1:] for run in [('mixed', 'three', seed), ('single_source', 'three', seed),
                                                      ('single_source', 'studio', seed), ('single_source', 'web', seed)]]
  repeats = [('mixed', data, seed) for seed in SEEDS[1:] for data in ('studio', 'web')]
  return first + distinct + repeats


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--read', action='store_true', help='only read the stored rows')
  args = parser.parse_args()
  if not args.read:
    for sampler, data, seed in run_order():
      print(run_name(sampler, data, seed), run_one(sampler, data, seed, OUT), flush=True)
  read(OUT)


if __name__ == '__main__':
  main()
