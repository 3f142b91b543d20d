#!/usr/bin/env python
"""Evaluate the trained runs of the methods table again, with evaluators their training commit did not have, and
tabulate what they give (benchmarks/RESULTS.md). The training stays that of the table's commit; only the evaluation
is this commit's, and each row records both.

python lab/evaluate_runs.py --methods=table_siglip2 --evals=captioning [--datasets=synthetic]
    [--seeds=0,1,2,11,12,13] [--workdir=/tmp/vlp_methods] [--store=lab/results/methods]
    [--output=lab/results/evaluated/captioning] [--output_md=table.md] [--noevaluate]
    [--compare=run:other,...]

For each run (lab/catalogue.py's names and groups) and seed whose workdir, WORKDIR/<run>/seed<S> as
methods.py trains it, holds the run's final checkpoint: `python -m vlp_jax.evaluate --checkpoint=<workdir>
--evals=... --datasets=...` in a subprocess, as a user runs it. Its metrics go to OUTPUT/<run>/seed<S>.json with the
commit that evaluated and the one that trained (the methods store's row); a stored evaluation is not run again. A run
without its final checkpoint is named and left out. Prints each run's mean ± std over its seeds, per metric, beside
the metric's chance level. `--compare=run:other,...` adds, per pair and metric, the mean of run − other over the
seeds both have with its 95% t-interval (lab/methods.py's `--compare`); `--noevaluate` tabulates the stored
evaluations only, so that a table read at a later commit never evaluates with that commit's code.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from lab import catalogue, runner, statistics, tables  # noqa: E402

FLAGS = flags.FLAGS
OUTPUT = os.path.join(catalogue.ROOT, 'lab', 'results', 'evaluated')


def define_flags() -> None:
  flags.DEFINE_list('methods', ['table_siglip2'], f'Runs or groups of lab/catalogue.py: {sorted(catalogue.GROUPS)}.')
  flags.DEFINE_list('evals', None, 'The evaluators to run (python -m vlp_jax.evaluate --evals).', required=True)
  flags.DEFINE_list('datasets', ['synthetic'], 'The eval sets (python -m vlp_jax.evaluate --datasets).')
  flags.DEFINE_list('seeds', [str(s) for s in catalogue.DEV_SEEDS + catalogue.HELD_OUT_SEEDS], 'Seeds.')
  flags.DEFINE_string('workdir', '/tmp/vlp_methods', "lab/methods.py's --workdir, where the runs trained.")
  flags.DEFINE_string('store', runner.STORE, "lab/methods.py's store: each run's row, for its commit.")
  flags.DEFINE_string('output', '', 'Where each evaluation is kept (default: lab/results/evaluated/<evals>).')
  flags.DEFINE_string('output_md', '', 'Also write the Markdown table to this file.')
  flags.DEFINE_bool('evaluate', True, 'Evaluate the runs whose evaluation is not stored yet (--noevaluate: tabulate '
                    'the stored ones only).')
  flags.DEFINE_list('compare', [], 'Pairs run:other: the mean of run − other per metric over their shared seeds, '
                    'with its t-interval.')


def evaluation_command(workdir: str, evals: list[str], datasets: list[str], out_dir: str) -> list[str]:
  """The `python -m vlp_jax.evaluate` command of one run's final checkpoint, writing into `out_dir`."""
  return [sys.executable, '-m', 'vlp_jax.evaluate', f'--checkpoint={workdir}', f'--evals={",".join(evals)}',
          f'--datasets={",".join(datasets)}', f'--output_dir={out_dir}', '--overwrite']


def evaluate_run(name: str, seed: int, workdir: str, store: str, output: str, evals: list[str],
                 datasets: list[str]) -> dict | None:
  """Run `name` seed `seed`'s evaluation (or read it from `output`) -> its row {'run', 'seed', metrics...,
  'commit' (evaluating), 'trained_commit', 'command'}; None when its workdir lacks the final checkpoint."""
  if (row := runner.stored_row(output, name, seed)) is not None:
    return row
  run_dir = runner.run_dir(workdir, name, seed)
  trained = runner.stored_row(store, name, seed)
  if trained is None or runner.latest_checkpoint_step(run_dir) < runner.config_steps(name):
    return None
  out_dir = os.path.join(run_dir, 'evaluated', '+'.join(evals))
  command = evaluation_command(run_dir, evals, datasets, out_dir)
  result = subprocess.run(command, cwd=catalogue.ROOT, capture_output=True, text=True, env=runner.run_env(workdir))
  if result.returncode != 0:
    raise RuntimeError(f'{name} (seed {seed}): the evaluation failed with exit code {result.returncode}:\n'
                       f'{result.stderr[-3000:]}')
  with open(os.path.join(out_dir, 'eval_results.json')) as f:
    metrics = {key.removeprefix('eval/'): value for key, value in json.load(f)['metrics'].items()}
  row = {'run': name, 'seed': seed, **metrics, 'commit': runner.code_commit(),
         'trained_commit': trained.get('commit'), 'command': ' '.join(command[1:])}
  runner.write_row(output, row)
  return row


def metric_keys(rows: list[dict]) -> list[str]:
  """The metrics ('set/metric' keys, chance levels left out) that any of `rows` holds, sorted."""
  return sorted({key for row in rows for key in row if '/' in key and not key.endswith('_chance')})


def metric_table(rows: list[dict], names: list[str]) -> str:
  """Markdown: a row per run with rows, a column per metric (its chance level, `<metric>_chance`, beside it)."""
  metrics = metric_keys(rows)
  header = '| run | seeds | ' + ' | '.join(f'{m} (chance)' for m in metrics) + ' |'
  lines = [header, '|' + '---|' * (len(metrics) + 2)]
  for name in names:
    own = [row for row in rows if row['run'] == name]
    if not own:
      continue
    cells = []
    for metric in metrics:
      values = [row[metric] for row in own if metric in row]
      chances = [row[f'{metric}_chance'] for row in own if f'{metric}_chance' in row]
      if not values:
        cells.append('-')
        continue
      mean, std = statistics.mean_std(values)
      chance = f' ({statistics.mean_std(chances)[0]:.3f})' if chances else ''
      cells.append(f'{mean:.3f} ± {std:.3f}{chance}')
    seeds = ','.join(str(row['seed']) for row in own)
    lines.append(f'| `{name}` | {seeds} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def collect_rows(names: list[str], seeds: list[int], workdir: str, store: str, output: str, evals: list[str],
                 datasets: list[str], evaluate: bool = True) -> list[dict]:
  """Each run's evaluation row for each seed: stored in `output`, else evaluated now (`evaluate_run`) unless
  `evaluate` is False; the runs without one are named and left out."""
  rows = []
  for seed in seeds:
    for name in names:
      if evaluate:
        row = evaluate_run(name, seed, workdir, store, output, evals, datasets)
        missing = f'no final checkpoint in {runner.run_dir(workdir, name, seed)} or no row in {store}'
      else:
        row, missing = runner.stored_row(output, name, seed), f'no stored evaluation in {output}'
      print(f'{name} seed {seed}: ' + ('evaluated' if row is not None else f'{missing}; left out'), flush=True)
      if row is not None:
        rows.append(row)
  return rows


def comparison_table(rows: list[dict], pairs: list[tuple[str, str]]) -> str:
  """Markdown: per pair (run, other) and metric of `rows`, run − other over their shared seeds with its t-interval
  (lab/methods.py's comparison table, over this evaluation's metrics)."""
  return tables.comparison_table(rows, pairs, [(key, key) for key in metric_keys(rows)])


def main(argv):
  del argv
  pairs = tables.parse_pairs(FLAGS.compare)
  names = list(dict.fromkeys([*catalogue.expand(FLAGS.methods), *(run for pair in pairs for run in pair)]))
  output = FLAGS.output or os.path.join(OUTPUT, '+'.join(FLAGS.evals))
  rows = collect_rows(names, list(map(int, FLAGS.seeds)), FLAGS.workdir, FLAGS.store, output, FLAGS.evals,
                      FLAGS.datasets, FLAGS.evaluate)
  if not rows:
    print('No run has both its final checkpoint and a stored row: nothing to tabulate.' if FLAGS.evaluate else
          f'No stored evaluation in {output}: nothing to tabulate.')
    return
  commits = sorted({(row['trained_commit'], row['commit']) for row in rows})
  markdown = (metric_table(rows, names) + f'\n\n{len(rows)} runs; trained at, evaluated at: '
              + ', '.join(f'{t}, {e}' for t, e in commits) + '.')
  if pairs:
    markdown += '\n\n' + comparison_table(rows, pairs)
  print('\n' + markdown)
  if FLAGS.output_md:
    with open(FLAGS.output_md, 'w') as f:
      f.write(markdown + '\n')


if __name__ == '__main__':
  define_flags()
  app.run(main)
