"""The methods table in Markdown (the headline table, every run's mean ± std, every run against its controls seed by
seed, a comparison of named pairs) and the plot of its verdicts, from the stored rows."""
from __future__ import annotations

from matplotlib.figure import Figure

from lab.catalogue import COLUMNS, DEV_SEEDS, HELD_OUT_SEEDS, RUNS, TEACHER_SEED_OFFSET
from lab.statistics import (CONFIDENCE, commits_of, interval_cell, interval_verdict, mean_of, mean_std, pair_seeds,
                            pair_verdict, paired_interval, seed_differences, timing_machine)


def mean_std_cell(values: list[float], key: str, signed: bool = False) -> str:
  """mean ± std of `values` at the metric's precision (RSUM is in percent); '-' without values."""
  if not values:
    return '-'
  digits = 1 if key.endswith('rsum') else 3
  mean, std = mean_std(values)
  return f'{mean:{"+" if signed else ""}.{digits}f} ± {std:.{digits}f}'


def table(rows: list[dict], names: list[str], memory: dict[str, float]) -> str:
  """Markdown: one line per run name, mean +- std over its seeds for every column, wall time, step time vs CLIP."""
  by_name = {name: [r for r in rows if r['run'] == name] for name in names}
  base = by_name.get('clip') or next(iter(by_name.values()))
  machine = timing_machine(rows)
  base_rate = mean_of(base, 'samples_per_sec', machine)
  heads = [h for _, h in COLUMNS] + ['wall per run (median)', 'step time vs CLIP'] + (['step memory vs CLIP'] if memory else [])
  lines = ['| run | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name, runs in by_name.items():
    if not runs or name == 'clip_teacher':
      continue
    cells = []
    for key, _ in COLUMNS:
      values = [r[key] for r in runs if r.get(key) is not None]
      digits = 1 if key.endswith('rsum') else 3  # RSUM is in percent
      cells.append(f'{mean_std(values)[0]:.{digits}f} ± {mean_std(values)[1]:.{digits}f}' if values else '-')
    rate = mean_of(runs, 'samples_per_sec', machine)
    wall = mean_of(runs, 'wall_seconds', machine)
    cells += [f'{wall:.0f} s' if wall else '-', f'{base_rate / rate:.2f}x' if rate and base_rate else '-']
    if memory:
      cells.append(f"{memory[name] / memory.get('clip', memory[name]):.2f}x" if name in memory else '-')
    seeds = ','.join(str(r['seed']) for r in runs)
    lines.append(f'| {RUNS[name].label} (`{name}`, seeds {seeds}) | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def paired_table(rows: list[dict], names: list[str]) -> str:
  """Markdown: each run minus its baseline CLIP (and minus its own control, where that is another run), seed by seed.

  Seeds move every metric a lot at this scale (CLIP's zero-shot spans 0.20-0.33 over seeds 0-2), and a method
  trained with the same seed shares its initialisation and data order with its control, so the per-seed difference
  is the sharper comparison. Cells: mean ± std of the difference, then how many seeds the run is ahead on.
  """
  by_key = {(r['run'], r['seed']): r for r in rows}
  all_seeds = sorted({r['seed'] for r in rows})
  heads = [h for _, h in COLUMNS]
  lines = ['| run − control | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name in names:
    spec = RUNS[name]
    if name in ('clip', 'clip_teacher') or not any(r['run'] == name for r in rows):
      continue
    for control in dict.fromkeys((spec.baseline, spec.control or spec.baseline, *spec.compute_controls)):
      if control is None or control == name:
        continue
      seeds = pair_seeds(by_key, name, control, all_seeds)
      if not seeds:
        continue
      cells = []
      for key, _ in COLUMNS:
        diffs = seed_differences(by_key, name, control, seeds, key)
        digits = 1 if key.endswith('rsum') else 3
        mean, std = mean_std(diffs) if diffs else (0.0, 0.0)
        ahead = sum(d > 0 for d in diffs)
        cells.append(f'{mean:+.{digits}f} ± {std:.{digits}f} ({ahead}/{len(diffs)})' if diffs else '-')
      lines.append(f'| `{name}` − `{control}` (seeds {",".join(map(str, seeds))}) | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def parse_pairs(specs: list[str]) -> list[tuple[str, str]]:
  """'run:other' strings -> (run, other), each a known run; a clear error naming the bad entry otherwise."""
  pairs = []
  for spec in specs:
    parts = spec.split(':')
    if len(parts) != 2 or not all(parts):
      raise ValueError(f'--compare: {spec!r} is not run:other')
    unknown = [p for p in parts if p not in RUNS]
    if unknown:
      raise ValueError(f'--compare: unknown run {unknown[0]!r} in {spec!r}; runs: {sorted(RUNS)}')
    pairs.append((parts[0], parts[1]))
  return pairs


def comparison_table(rows: list[dict], pairs: list[tuple[str, str]], columns=COLUMNS) -> str:
  """Markdown: per pair (run, other) and column ((key, heading) pairs, the table's COLUMNS by default), the mean of
  run − other over the seeds both have, with its CONFIDENCE t-interval (`interval_cell`) and how many seeds run is
  ahead on; '-' below two seeds."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  all_seeds = sorted({r['seed'] for r in rows})
  heads = [h for _, h in columns]
  lines = ['| run − other (seeds) | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name, other in pairs:
    seeds = pair_seeds(by_key, name, other, all_seeds)
    cells = []
    for key, _ in columns:
      diffs = seed_differences(by_key, name, other, seeds, key)
      cell = interval_cell(diffs, key)
      cells.append(f'{cell} ({sum(d > 0 for d in diffs)}/{len(diffs)})' if cell != '-' else '-')
    lines.append(f'| `{name}` − `{other}` ({",".join(map(str, seeds)) or "no shared seeds"}) | '
                 + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def headline_pairs(names: list[str]) -> list[tuple[str, str]]:
  """(method, control) for each run of `names` with METRICS: its CONTROL (else BASELINE), then each COMPUTE_CONTROL."""
  return [(n, c) for n in names for c in dict.fromkeys((RUNS[n].control or RUNS[n].baseline, *RUNS[n].compute_controls))
          if c and c != n and RUNS[n].metrics]


def verdict_entries(rows: list[dict], names: list[str], dev_seeds=DEV_SEEDS, held_out_seeds=HELD_OUT_SEEDS
                    ) -> list[dict]:
  """Per headline pair (`headline_pairs`) with seeds of both: its headline metric's paired differences (method −
  control) on the development and held-out seeds, and the interval and verdict of the held-out ones alone, as
  `verdict_figure` draws them."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  entries = []
  for name, control in headline_pairs(names):
    key = RUNS[name].metrics[0]
    dev, held = pair_seeds(by_key, name, control, dev_seeds), pair_seeds(by_key, name, control, held_out_seeds)
    if not dev + held:
      continue
    diff = {s: by_key[(name, s)][key] - by_key[(control, s)][key] for s in dev + held}
    judged = [diff[s] for s in held]  # the verdict reads the held-out seeds alone (docs/evidence.md, rule 3)
    commits = commits_of([by_key[(r, s)] for s in dev + held for r in (name, control)])
    entries.append({'method': name, 'control': control, 'metric': dict(COLUMNS)[key],
                    'dev': [diff[s] for s in dev], 'held_out': judged,
                    'interval': paired_interval(judged) if len(judged) > 1 else None,
                    'verdict': pair_verdict(judged, commits, len(held_out_seeds))})
  return entries


VERDICT_COLOURS = {'ahead': 'tab:green', 'behind': 'tab:red', 'not distinguishable at this budget': 'tab:gray'}


def verdict_figure(entries: list[dict], title: str = ''):
  """A matplotlib Figure: a panel per headline metric, a line per method − control pair with the 95% t-interval of
  the mean paired difference on the held-out seeds (coloured by verdict; pending ones pale), the development seeds'
  differences as open circles and the held-out seeds' as filled triangles, and zero marked."""
  metrics = list(dict.fromkeys(e['metric'] for e in entries))
  counts = [sum(e['metric'] == m for e in entries) for m in metrics]
  fig = Figure(figsize=(9, 0.9 + 0.42 * sum(counts) + 0.5 * len(metrics)))
  axes = fig.subplots(len(metrics), 1, squeeze=False, gridspec_kw={'height_ratios': counts})[:, 0]
  for ax, metric in zip(axes, metrics):
    mine = [e for e in entries if e['metric'] == metric][::-1]  # the first at the top
    for y, e in enumerate(mine):
      colour = VERDICT_COLOURS.get(e['verdict'], 'tab:blue')
      pale = e['verdict'] not in VERDICT_COLOURS
      if e['interval']:
        mean, low, high = e['interval']
        ax.plot([low, high], [y, y], color=colour, alpha=0.45 if pale else 1.0, linewidth=2.5)
        ax.plot([mean], [y], 'o', color=colour, markersize=6)
      ax.plot(e['dev'], [y + 0.18] * len(e['dev']), 'o', mfc='none', mec='black', markersize=5)
      ax.plot(e['held_out'], [y - 0.18] * len(e['held_out']), '^', color='black', markersize=5)
    ax.axvline(0.0, color='black', linewidth=0.8)
    ax.set_yticks(range(len(mine)), [f"{e['method']} − {e['control']}: {e['verdict']}" for e in mine], fontsize=8)
    ax.set_ylim(-0.7, len(mine) - 0.3)
    ax.set_xlabel(f'{metric}: method − control (95% t-interval over the held-out seeds ▲; o development, apart)',
                  fontsize=8)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  return fig


def headline_table(rows: list[dict], names: list[str], dev_seeds=DEV_SEEDS, held_out_seeds=HELD_OUT_SEEDS) -> str:
  """Markdown: per method (a run with METRICS) and each metric its paper reports, the method and its control on the
  development seeds (mean ± std), their paired difference there (reported apart: what settings were chosen on), the
  mean paired difference over the held-out seeds alone with its t-interval, the difference on each held-out seed and
  the verdict on them (`verdict`; rows of several commits get none), then the training compute (XLA's FLOPs; a
  TEACHER's training counted as the method's, '-' without its rows) and wall time of each side. A run with
  COMPUTE_CONTROLs gets a block against each."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  machine = timing_machine(rows)
  heads = ['method', 'control', "paper's metric", f'method, seeds {",".join(map(str, dev_seeds))}', 'control',
           'method − control, development seeds',
           f'method − control, held out ({",".join(map(str, held_out_seeds))}): mean [{CONFIDENCE:.0%} t-interval]',
           'each held-out seed', 'verdict (held out)',
           'training TFLOP, method / control', 'wall per run (median), method / control', 'regenerate']
  lines = ['| ' + ' | '.join(heads) + ' |', '|---' * len(heads) + '|']
  for name, control in headline_pairs(names):
    run = RUNS[name]
    dev, held = pair_seeds(by_key, name, control, dev_seeds), pair_seeds(by_key, name, control, held_out_seeds)
    mine, theirs = [by_key[(name, s)] for s in dev + held], [by_key[(control, s)] for s in dev + held]
    commits = commits_of(mine + theirs)
    for k, key in enumerate(run.metrics):
      diff = lambda s: by_key[(name, s)][key] - by_key[(control, s)][key]  # noqa: E731
      held_cells = ', '.join(f'{diff(s):+.{1 if key.endswith("rsum") else 3}f}' for s in held) or '-'
      judged = pair_verdict([diff(s) for s in held], commits, len(held_out_seeds))
      cells = [f'{run.label} (`{name}`)' if k == 0 else '', f'`{control}`' if k == 0 else '', dict(COLUMNS)[key],
               mean_std_cell([by_key[(name, s)][key] for s in dev], key),
               mean_std_cell([by_key[(control, s)][key] for s in dev], key),
               mean_std_cell([diff(s) for s in dev], key, signed=True)
               + f' ({sum(diff(s) > 0 for s in dev)}/{len(dev)})',
               interval_cell([diff(s) for s in held], key), held_cells, ('**{}**' if k == 0 else '{}').format(judged)]
      if k == 0:
        flops = [mean_of(side, 'train_flops') for side in (mine, theirs)]
        if run.teacher and flops[0]:  # the teacher's training is part of the method's compute
          teachers = [by_key[(run.teacher, s + TEACHER_SEED_OFFSET)] for s in dev + held
                      if (run.teacher, s + TEACHER_SEED_OFFSET) in by_key]
          flops[0] = flops[0] + mean_of(teachers, 'train_flops') if teachers else None
        walls = [mean_of(side, 'wall_seconds', machine) for side in (mine, theirs)]
        cells += [' / '.join(f'{f / 1e12:.0f}' if f else '-' for f in flops)
                  + (f' ({flops[0] / flops[1]:.2f}x)' if all(flops) else ''),
                  ' / '.join(f'{w:.0f} s' if w else '-' for w in walls), f'`--methods={name}`']
      else:
        cells += ['', '', '']
      lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def budget_change_table(first: list[dict], second: list[dict], pairs: list[tuple[str, str]], budget: int,
                        seeds=HELD_OUT_SEEDS) -> str:
  """Markdown: per (method, control) pair and each metric it declares (the headline first), the mean paired difference
  with its t-interval at the first budget (rows `first`) and at `budget` times the steps (rows `second`), both on
  `seeds`, and the change between them, paired by seed (the difference at `budget` minus that at 1x, seed by seed);
  bold where the interval excludes zero. Reading both budgets on the same seeds is what lets the change be read at
  all."""
  one, other = ({(r['run'], r['seed']): r for r in rows} for rows in (first, second))
  label = ','.join(map(str, seeds))
  lines = [f'| pair, metric | 1x: seeds {label} | {budget}x: seeds {label} | change, {budget}x − 1x, paired '
           'by seed |', '|---|---|---|---|']
  for name, control in pairs:
    for k, key in enumerate(RUNS[name].metrics):
      shared = [s for s in pair_seeds(one, name, control, seeds) if s in pair_seeds(other, name, control, seeds)
                and all(rows[(run, s)].get(key) is not None for rows in (one, other) for run in (name, control))]
      at_one, at_other = (seed_differences(rows, name, control, shared, key) for rows in (one, other))
      cells = [_bold_if_clear(diffs, key) for diffs in (at_one, at_other, [b - a for a, b in zip(at_one, at_other)])]
      pair = f'`{name}` − `{control}`, ' if k == 0 else ''
      lines.append(f'| {pair}{dict(COLUMNS)[key]} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _bold_if_clear(differences: list[float], key: str) -> str:
  """interval_cell with its mean in bold where the interval excludes zero."""
  cell = interval_cell(differences, key)
  if len(differences) < 2 or interval_verdict(*paired_interval(differences)[1:], neither='') == '':
    return cell
  mean, rest = cell.split(' ', 1)
  return f'**{mean}** {rest}'


def results_block(rows: list[dict], names: list[str], seeds: list[int], budget: int = 1,
                  memory: dict[str, float] | None = None) -> str:
  """The tables of one budget as benchmarks/RESULTS.md shows them: the headline table, then, folded, every run's mean
  ± std over its seeds, and how many runs over which seeds. Every run against its controls seed by seed
  (`paired_table`) is left to `python -m lab.methods --notrain`: it summarises all seeds together, development and
  held out, which no reading may pool."""
  return (headline_table(rows, names) + '\n\n<details><summary>Every run, mean ± std over its seeds</summary>\n\n'
          + table(rows, names, memory or {}) + f'\n\n</details>\n\n{len(rows)} runs, seeds {",".join(map(str, seeds))}'
          + (f", {budget}x the configs' steps." if budget != 1 else '.'))
