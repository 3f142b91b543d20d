#!/usr/bin/env python
"""The learning-curve protocol's readings (docs/evidence.md, "The learning-curve protocol"), from stored rows:

  python -m lab.curves rates           # the learning-rate check: each curve run's rate, written to LEARNING_RATES_JSON
  python -m lab.curves table [--plots] # the held-out curves' verdicts (and a plot per pair in lab/results/curves/)

The learning-rate check trains the ten runs of the curves (lab/catalogue.py's group `curves`) at each of
LEARNING_RATES for RATE_CHECK_BUDGET times their steps on the development seeds, one store per rate
(`rate_store`); `rates` refuses while any of those rows is missing. Each run's rate is the one with the highest
development mean of its headline metric (its pair's, for a control: `curve_headline`), ties to SHARED_RATE. The
held-out curves train every run at its chosen rate for CURVE_BUDGET times its steps on CURVE_SEEDS, evaluated every
CURVE_EVALUATIONS-th of the run; each row holds its `evaluations` (lab/runner.py). The table reads them: per pair and
declared metric the seed-paired difference at the end and at equal FLOPs with its 95% t-interval, the smallest
effect detectable beside it, Holm's adjustment over the six headline metrics at the end, and "level" only by two
one-sided tests inside the declared margin.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from matplotlib.figure import Figure

from lab.catalogue import (COLUMNS, CURVE_BUDGET, CURVE_PAIRS, CURVE_SEEDS, DEV_SEEDS, GROUPS, LEARNING_RATES,
                           RATE_CHECK_BUDGET, ROOT, RUNS, SHARED_RATE, TEACHER_SEED_OFFSET, curve_headline)
from lab.runner import of_budget, of_rate, planned_runs, stored_row
from lab.statistics import (CONFIDENCE, LEVEL_ALPHA, detectable_effect, equal_flops_values, holm_adjusted,
                            interval_cell, interval_verdict, is_level, level_margin, mean_std, paired_interval,
                            paired_p_value, tabulated)
from vlp_jax.evalsets.synthetic import NOVEL_SETS, NOVEL_SUFFIX

CURVES_DIR = os.path.join(ROOT, 'lab', 'results', 'curves')
RATE_STORE = os.path.join(CURVES_DIR, 'rate_check')  # + _x<budget>_lr<rate>: one store per rate
CURVE_STORE = os.path.join(CURVES_DIR, 'held_out')  # + _x<budget>
LEARNING_RATES_JSON = os.path.join(CURVES_DIR, 'learning_rates.json')
# The protocol's planning SD of each pair's headline paired difference (its table, keyed by method)
PLANNING_SDS = {'saco': 0.040, 'slip': 0.103, 'cosmos': 0.037, 'zerovl': 56.0, 'siglip_regions': 0.044,
                'siglip2': 0.019}


def rate_store(lr: float, store: str = RATE_STORE, budget: int = RATE_CHECK_BUDGET) -> str:
  """The store of the learning-rate check's runs at `lr` (as `python -m lab.methods --store=STORE --budget=BUDGET
  --learning_rate=LR` names it)."""
  return of_rate(of_budget(store, budget), lr)


def rows_by_rate(names=GROUPS['curves'], seeds=DEV_SEEDS, rates=LEARNING_RATES, store: str = RATE_STORE,
                 budget: int = RATE_CHECK_BUDGET) -> dict[float, list[dict]]:
  """{rate: the training rows stored for it}, over the runs `names` and `seeds` (evaluation-only rows left out)."""
  return {lr: tabulated([row for key in planned_runs(list(names), list(seeds))
                         if (row := stored_row(rate_store(lr, store, budget), *key)) is not None])[0]
          for lr in rates}


def missing_rows(by_rate: dict[float, list[dict]], names, seeds) -> list[str]:
  """'<run> seed S at rate R' for every run of `names`, seed of `seeds` and rate of `by_rate` without a row there."""
  have = {(lr, row['run'], row['seed']) for lr, rows in by_rate.items() for row in rows}
  return [f'{name} seed {seed} at rate {lr:g}' for lr in by_rate for name in names for seed in seeds
          if (lr, name, seed) not in have]


def chosen_rate(means: dict[float, float], shared: float = SHARED_RATE) -> float:
  """The rate of `means` ({rate: development mean of the headline metric}) with the highest mean; a tie (equal to
  1e-12 relative) goes to `shared` when it is among the tied, and a tie without it, which the protocol does not
  settle, is a ValueError."""
  best = max(means.values())
  tied = [lr for lr, mean in means.items() if math.isclose(mean, best, rel_tol=1e-12, abs_tol=1e-15)]
  if len(tied) == 1:
    return tied[0]
  if shared in tied:
    return shared
  raise ValueError(f'rates {tied} tie at {best} and none is {shared:g}: the protocol does not settle this; choose, '
                   'and report it as a departure')


def rate_readings(by_rate: dict[float, list[dict]], names=GROUPS['curves'], seeds=DEV_SEEDS) -> dict[str, dict]:
  """{run: {'metric': its headline (`curve_headline`), 'means': {rate: its mean over `seeds`}, 'learning_rate':
  `chosen_rate`}} for every run of `names`; a ValueError naming the missing rows while any is missing."""
  missing = missing_rows(by_rate, names, seeds)
  if missing:
    raise ValueError(f'{len(missing)} rows of the learning-rate check are missing, e.g. {", ".join(missing[:5])}')
  out = {}
  for name in names:
    key = curve_headline(name)
    means = {lr: mean_std([r[key] for r in rows if r['run'] == name and r['seed'] in seeds])[0]
             for lr, rows in by_rate.items()}
    out[name] = {'metric': key, 'means': means, 'learning_rate': chosen_rate(means)}
  return out


def rates_document(readings: dict[str, dict], seeds=DEV_SEEDS, budget: int = RATE_CHECK_BUDGET) -> dict:
  """What LEARNING_RATES_JSON holds: {'learning_rates': {run: rate}, 'readings': {run: {'metric', 'means': {'<rate>':
  mean}}}, 'seeds', 'budget'}; `python -m lab.methods --learning_rates=<it>` reads 'learning_rates'."""
  return {'learning_rates': {name: r['learning_rate'] for name, r in readings.items()},
          'readings': {name: {'metric': r['metric'], 'means': {f'{lr:g}': m for lr, m in r['means'].items()}}
                       for name, r in readings.items()},
          'seeds': list(seeds), 'budget': budget}


def read_rates(path: str = LEARNING_RATES_JSON) -> dict[str, float]:
  """{run: learning rate} of a file `rates_document` wrote."""
  with open(path) as f:
    return {name: float(lr) for name, lr in json.load(f)['learning_rates'].items()}


def teacher_flops(by_key: dict, name: str, seed: int) -> float:
  """The training FLOPs of run `name`'s teacher (seed + TEACHER_SEED_OFFSET), which count as the run's; 0 without a
  teacher. A KeyError where the teacher's row is missing: a curve of a taught run is not read without it."""
  teacher = RUNS[name].teacher
  return by_key[(teacher, seed + TEACHER_SEED_OFFSET)]['train_flops'] if teacher else 0.0


def curve(by_key: dict, name: str, seed: int, key: str) -> tuple[list[float], list[float]]:
  """(FLOPs (n,), values (n,)) of metric `key` over the stored evaluations of run `name` with `seed`, FLOPs
  cumulative and counting a teacher's; the evaluations without the metric left out."""
  extra = teacher_flops(by_key, name, seed)
  points = [(e['train_flops'] + extra, e['metrics'][key]) for e in by_key[(name, seed)].get('evaluations', [])
            if e.get('train_flops') and e['metrics'].get(key) is not None]
  return [p[0] for p in points], [p[1] for p in points]


def curve_seeds(by_key: dict, method: str, control: str, seeds=CURVE_SEEDS) -> list[int]:
  """The seeds of `seeds` where both runs have a row with evaluations."""
  return [s for s in seeds if all(by_key.get((n, s), {}).get('evaluations') for n in (method, control))]


def novel_key(key: str) -> str | None:
  """Metric `key` ('<set>/<metric>') on its set's novel test subset ('synthetic_novel/...', 'synthetic_long_novel/...':
  vlp_jax/evalsets/synthetic.py), None for a set without one."""
  name, _, metric = key.partition('/')
  return f'{name}{NOVEL_SUFFIX}/{metric}' if f'{name}{NOVEL_SUFFIX}' in NOVEL_SETS else None


def pair_differences(by_key: dict, method: str, control: str, key: str, seeds) -> dict[str, list]:
  """Seed by seed over `seeds` (both runs' curves have metric `key`): 'end', method − control at both runs' last
  evaluations; 'equal_flops', at equal FLOPs (`equal_flops_values`); 'flops', each seed's F; 'novel_end', the end
  point's difference on the novel test subset (`novel_key`), over the seeds whose runs report it."""
  out = {'end': [], 'equal_flops': [], 'flops': [], 'novel_end': []}
  novel = novel_key(key)
  for seed in seeds:
    mine, theirs = curve(by_key, method, seed, key), curve(by_key, control, seed, key)
    if not mine[0] or not theirs[0]:
      continue
    at_mine, at_theirs, budget = equal_flops_values(mine, theirs)
    out['end'].append(mine[1][-1] - theirs[1][-1])
    out['equal_flops'].append(at_mine - at_theirs)
    out['flops'].append(budget)
    if novel:
      novel_mine, novel_theirs = curve(by_key, method, seed, novel), curve(by_key, control, seed, novel)
      if novel_mine[0] and novel_theirs[0]:
        out['novel_end'].append(novel_mine[1][-1] - novel_theirs[1][-1])
  return out


def reading_cell(differences: list[float], key: str) -> str:
  """'mean [low, high] verdict' of paired `differences` (`interval_cell`), '-' below two."""
  if len(differences) < 2:
    return '-'
  _, low, high = paired_interval(differences)
  return f'{interval_cell(differences, key)} {interval_verdict(low, high, "not distinguishable")}'


def detectable_cell(method: str, key: str, differences: list[float]) -> str:
  """'planned / realised': the smallest effect detectable at 80% power, from the protocol's planning SD on
  len(CURVE_SEEDS) seeds (headline metric only) and from the realised SD of `differences` on their seeds."""
  digits = 1 if key.endswith('rsum') else 3
  planned = (f'{detectable_effect(PLANNING_SDS[method], len(CURVE_SEEDS)):.{digits}f}'
             if method in PLANNING_SDS and key == curve_headline(method) else '-')
  std = mean_std(differences)[1] if len(differences) > 1 else 0.0
  realised = f'{detectable_effect(std, len(differences)):.{digits}f}' if std > 0 else '-'
  return f'{planned} / {realised}'


def curve_entries(rows: list[dict], pairs=CURVE_PAIRS, seeds=CURVE_SEEDS) -> list[dict]:
  """Per pair and declared metric: {'method', 'control', 'metric', 'headline' (its first), 'seeds', 'differences'
  (`pair_differences`), 'p' (the end point's paired t-test, headline only), 'holm' (its adjusted p over the pairs'
  headlines with seeds)}."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  entries = []
  for method, control, metrics in pairs:
    found = curve_seeds(by_key, method, control, seeds)
    for k, key in enumerate(metrics):
      differences = pair_differences(by_key, method, control, key, found)
      entries.append({'method': method, 'control': control, 'metric': key, 'headline': k == 0, 'seeds': found,
                      'differences': differences,
                      'p': paired_p_value(differences['end']) if k == 0 and len(differences['end']) > 1 else None})
  family = [e for e in entries if e['p'] is not None]
  for entry, adjusted in zip(family, holm_adjusted([e['p'] for e in family])):
    entry['holm'] = adjusted
  return entries


def confirmed(entry: dict, family_level: float = 1 - CONFIDENCE) -> str:
  """'p (Holm p): confirmed' where a headline end-point verdict survives Holm's adjustment, '... not confirmed' where
  it does not, '-' for a descriptive reading."""
  if entry['p'] is None:
    return '-'
  end = entry['differences']['end']
  _, low, high = paired_interval(end)
  survives = entry['holm'] <= family_level and (low > 0 or high < 0)
  return f"{entry['p']:.3f} ({entry['holm']:.3f}): {'confirmed' if survives else 'not confirmed'}"


def level_cell(entry: dict) -> str:
  """'level (±margin)' where both one-sided tests fall inside the declared margin at the end, else 'not level'
  ('no margin' where none is declared)."""
  margin = level_margin(entry['metric'])
  if margin is None:
    return 'no margin'
  end = entry['differences']['end']
  return f'level (±{margin:g})' if len(end) > 1 and is_level(end, margin) else f'not level (±{margin:g})'


def curves_table(rows: list[dict], pairs=CURVE_PAIRS, seeds=CURVE_SEEDS) -> str:
  """Markdown: a line per pair and declared metric with both verdicts and their intervals, the end point on the novel
  test subset (descriptive; 'none' for a metric without one), the detectable effect, the Holm-adjusted end point
  (headline metrics: the confirmatory family) and the TOST level check."""
  heads = ['method − control', 'metric', 'seeds', f'end: mean [{CONFIDENCE:.0%} t-interval], verdict',
           'end: p (Holm p over the headlines)', f'level at the end (TOST at {LEVEL_ALPHA:g})',
           'equal FLOPs: F (TFLOP), mean [interval], verdict (descriptive)',
           'end on the novel test subset: mean [interval], verdict (descriptive)',
           'smallest detectable effect, 80% power: planning SD / realised SD']
  lines = ['| ' + ' | '.join(heads) + ' |', '|---' * len(heads) + '|']
  for e in curve_entries(rows, pairs, seeds):
    d = e['differences']
    flops = f"{sum(d['flops']) / len(d['flops']) / 1e12:.0f}" if d['flops'] else '-'
    name = f"`{e['method']}` − `{e['control']}`" if e['headline'] else ''
    metric = dict(COLUMNS)[e['metric']] + (' (headline)' if e['headline'] else '')
    seeds_cell = ','.join(map(str, e['seeds'])) or f'pending (0 of {len(seeds)})'
    lines.append('| ' + ' | '.join([name, metric, seeds_cell, reading_cell(d['end'], e['metric']), confirmed(e),
                                    level_cell(e), f"{flops}: {reading_cell(d['equal_flops'], e['metric'])}",
                                    reading_cell(d['novel_end'], e['metric']) if novel_key(e['metric']) else 'none',
                                    detectable_cell(e['method'], e['metric'], d['end'])]) + ' |')
  return '\n'.join(lines)


def mean_curve(curves: list[tuple[list[float], list[float]]]) -> tuple[list[float], list[float]]:
  """The mean of seed `curves` ((FLOPs (n,), values (n,)) each) over their first k evaluations, k the shortest's."""
  k = min(len(c[0]) for c in curves)
  return ([sum(c[0][i] for c in curves) / len(curves) for i in range(k)],
          [sum(c[1][i] for c in curves) / len(curves) for i in range(k)])


def pair_figure(rows: list[dict], method: str, control: str, metrics, seeds=CURVE_SEEDS):
  """A matplotlib Figure for one pair: a panel per metric, each seed's curve (thin) and the mean over seeds (thick,
  with markers) of both runs against cumulative training FLOPs on a log axis."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  found = curve_seeds(by_key, method, control, seeds)
  fig = Figure(figsize=(4.6 * len(metrics), 3.6))
  axes = fig.subplots(1, len(metrics), squeeze=False)[0]
  for ax, key in zip(axes, metrics):
    for name, colour in ((method, 'tab:blue'), (control, 'tab:gray')):
      curves = [c for s in found if (c := curve(by_key, name, s, key))[0]]
      for flops, values in curves:
        ax.plot(flops, values, color=colour, alpha=0.35, linewidth=1)
      if curves:
        ax.plot(*mean_curve(curves), color=colour, marker='o', markersize=3, linewidth=2, label=f'`{name}` (mean)')
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=dict(COLUMNS)[key], title=dict(COLUMNS)[key])
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  fig.suptitle(f'{method} against {control}, seeds {",".join(map(str, found)) or "none yet"}')
  return fig


def plot_path(method: str, control: str, directory: str = CURVES_DIR) -> str:
  return os.path.join(directory, f'curves_{method}_vs_{control}.png')


def held_out_rows(store: str = CURVE_STORE, budget: int = CURVE_BUDGET, seeds=CURVE_SEEDS) -> list[dict]:
  """The held-out curves' stored training rows (teachers' too)."""
  store = of_budget(store, budget)
  return tabulated([row for key in planned_runs(list(GROUPS['curves']), list(seeds))
                    if (row := stored_row(store, *key)) is not None])[0]


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('command', choices=('rates', 'table'))
  parser.add_argument('--plots', action='store_true', help='with table: draw a plot per pair into lab/results/curves/')
  args = parser.parse_args(argv)
  if args.command == 'rates':
    try:
      readings = rate_readings(rows_by_rate())
    except ValueError as error:
      sys.exit(f'Not choosing the rates: {error}')
    document = rates_document(readings)
    os.makedirs(os.path.dirname(LEARNING_RATES_JSON), exist_ok=True)
    with open(LEARNING_RATES_JSON, 'w') as f:
      json.dump(document, f, indent=1, sort_keys=True)
    for name, reading in readings.items():
      means = ', '.join(f'{lr:g}: {m:.4f}' for lr, m in reading['means'].items())
      print(f"{name}: {reading['learning_rate']:g} ({reading['metric']}, development means {means})")
    print(f'Wrote {os.path.relpath(LEARNING_RATES_JSON, ROOT)}.')
    return
  rows = held_out_rows()
  print(curves_table(rows))
  if args.plots:
    for method, control, metrics in CURVE_PAIRS:
      pair_figure(rows, method, control, metrics).savefig(plot_path(method, control), dpi=100, bbox_inches='tight')


if __name__ == '__main__':
  main()
