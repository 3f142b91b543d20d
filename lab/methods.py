#!/usr/bin/env python
"""The methods table: train each method, its control, its mechanism ablations and, where it costs much more, a
compute-matched control on the embedded dataset under one budget, over the development seeds and the held-out seeds,
and tabulate the paired differences and the held-out verdict (docs/evidence.md).

python -m lab.methods [--methods=table] [--seeds=0,1,2,11,12,13] [--jobs=1] [--workdir=/tmp/vlp_methods]
                      [--output=table.md] [--notrain] [--memory] [--budget=1] [--nocompute_controls]
                      [--learning_rate=LR | --learning_rates=FILE.json]

The second budget (docs/evidence.md): `--methods=table_budget --budget=4 --seeds=11,12,13 --nocompute_controls`
trains the headline methods and their controls for 4x their configs' steps (compute-matched controls and teachers
scale with them, so they stay matched), in a workdir and a store of their own (`_x4`).

--methods takes run names, groups of them (lab/catalogue.py's GROUPS: 'table', 'table_saco', ...) or 'all'; a run
brings its control, compute-matched control, continued run and teacher along, so `--methods=NAME` regenerates NAME's
row. Every run, its config and what it is compared with are in lab/catalogue.py; lab/runner.py trains them.

Prints how many runs are stored and to train, then a line per finished run (its wall time, its headline metric and
the time the rest should take), then the Markdown tables (also written to --output): the headline (method against
control on the paper's metrics, development seeds mean ± std, held-out differences and verdict, compute), every run's
mean ± std, and every run against its controls seed by seed. `--update_results` then regenerates
benchmarks/RESULTS.md from the stores of lab/results/ (`python -m lab.report --write`) and redraws the verdict plot.
"""
from __future__ import annotations

import concurrent.futures
import os
import time

from absl import app, flags

from lab import report
from lab.catalogue import DEV_SEEDS, GROUPS, HELD_OUT_SEEDS, ROOT, RUNS, SECOND_BUDGET, TEACHER_SEED_OFFSET, expand
from lab.compiled import step_memory_bytes
from lab.curves import read_rates
from lab.runner import (STORE, Progress, of_budget, of_rate, planned_runs, run_config, stored_row, train,
                        train_with_prerequisites)
from lab.statistics import tabulated
from lab.tables import comparison_table, headline_table, paired_table, parse_pairs, table

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Only when run as a script, so that tests can import the functions beside vlp_jax.main (which has --workdir)."""
  flags.DEFINE_list('methods', ['table'], f'Runs or groups: {sorted(RUNS)}; groups {sorted(GROUPS)}; all.')
  flags.DEFINE_list('seeds', [str(s) for s in DEV_SEEDS + HELD_OUT_SEEDS],
                    'Seeds (config.seed) to run every method with: the development seeds, then the held-out ones.')
  flags.DEFINE_bool('train', True, 'Train the runs the store lacks; --notrain only tabulates the stored ones.')
  flags.DEFINE_string('store', STORE, "Where each finished run's row is kept ('' keeps none).")
  flags.DEFINE_integer('steps', None, "Override total_steps of every from-scratch run (default: the configs').")
  flags.DEFINE_integer('jobs', 1, 'Runs trained at once. Each uses every core, but compiles, evaluations and the input '
                       'pipeline leave some idle: two at once finish a set of runs about 15% sooner on a 2-core CPU, '
                       'but then no wall time is clean, and the tables average only those of runs trained alone.')
  flags.DEFINE_string('workdir', '/tmp/vlp_methods', 'Where the runs write (a rerun skips finished runs).')
  flags.DEFINE_string('output', '', 'Also write the Markdown table to this file.')
  flags.DEFINE_bool('update_results', False, 'Then regenerate benchmarks/RESULTS.md from the stores of lab/results/ '
                    '(python -m lab.report --write) and draw the verdicts of --budget into '
                    'lab/results/methods_verdicts[_x<budget>].png.')
  flags.DEFINE_bool('memory', False, "Add each method's compiled train-step memory relative to CLIP.")
  flags.DEFINE_integer('eval_every', 0, 'Evaluate every N steps as well as at the end (0: at the end only, which '
                       'the table reads; the configs evaluate every 100 steps for their curves).')
  flags.DEFINE_integer('budget', 1, f'Train every from-scratch run for this many times its steps ({SECOND_BUDGET}: the '
                       "table's second budget), in --workdir_x<budget>, --store_x<budget> and its own section "
                       'of RESULTS.md.', lower_bound=1)
  flags.DEFINE_list('compare', [], 'Pairs run:other (e.g. cosmos:cosmos_no_distill): print, instead of the tables, '
                    "each pair's mean paired difference over their shared seeds with its t-interval, for every "
                    'column. For ablations that are not a headline pair: a description, not a verdict (its pair was '
                    'not declared before the runs).')
  flags.DEFINE_float('learning_rate', None, 'Train every run at this learning rate (config.optim.lr) instead of its '
                     "config's, in --workdir_lr<rate> and --store_lr<rate> (after any _x<budget>), so that runs of "
                     'different rates never mix; each row records its rate. The learning-rate check of the curves '
                     '(docs/evidence.md; python -m lab.curves rates).')
  flags.DEFINE_string('learning_rates', '', 'A JSON file of per-run learning rates, as `python -m lab.curves rates` '
                      'writes it: train each run at its own (every run must be in it); a stored row of another rate '
                      'is refused.')
  flags.DEFINE_bool('compute_controls', True, "Bring each run's compute-matched controls along (the second budget "
                    'runs without them).')


def run_rates(names: list[str], rate: float | None, path: str = ''):
  """name -> the learning rate run `name` trains at (None: its config's): `rate` for every run, else each run's from
  the JSON file at `path` (`lab.curves.read_rates`; a ValueError naming the runs of `names` it lacks)."""
  if rate is not None and path:
    raise ValueError('--learning_rate and --learning_rates: give one')
  if not path:
    return lambda name: rate
  rates = read_rates(path)
  missing = [name for name in names if name not in rates]
  if missing:
    raise ValueError(f'--learning_rates={path} has no rate for {missing}')
  return rates.get


def main(argv):
  del argv
  pairs = parse_pairs(FLAGS.compare)
  names = expand(FLAGS.methods + [name for pair in pairs for name in pair], FLAGS.compute_controls)
  seeds = [int(s) for s in FLAGS.seeds]
  budget = FLAGS.budget
  rate_of = run_rates(names, FLAGS.learning_rate, FLAGS.learning_rates)
  root = of_rate(of_budget(FLAGS.workdir, budget), FLAGS.learning_rate)
  steps, store = FLAGS.steps, of_rate(of_budget(FLAGS.store, budget), FLAGS.learning_rate)
  began = time.time()
  futures: dict[tuple[str, int], concurrent.futures.Future] = {}
  progress = Progress(planned_runs(names, seeds), store, FLAGS.jobs)
  if FLAGS.train:
    print(progress.first_line(), flush=True)
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(FLAGS.jobs, 1)) as pool:

    def job(name: str, seed: int) -> dict:
      row = train_with_prerequisites(root, name, seed, futures, steps, FLAGS.eval_every, store, FLAGS.jobs, budget,
                                     rate_of(name))
      return progress.reported(row)

    def teacher_job(name: str, seed: int) -> dict:
      row = train(root, name, seed, steps, FLAGS.eval_every, store, FLAGS.jobs, budget, rate_of(name))
      return progress.reported(row)

    def stored(name: str, seed: int) -> dict | None:
      row = stored_row(store, name, seed) if store else None
      if row is None and not FLAGS.train:
        print(f'{name} seed {seed}: not in {store}', flush=True)
      return row

    for seed in seeds:
      for name in names:
        if not FLAGS.train:
          futures[(name, seed)] = pool.submit(stored, name, seed)
          if RUNS[name].teacher:
            futures[(RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)] = pool.submit(
                stored, RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)
          continue
        if RUNS[name].teacher:
          teacher = (RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)
          if teacher not in futures:
            futures[teacher] = pool.submit(teacher_job, *teacher)
        futures[(name, seed)] = pool.submit(job, name, seed)
    rows = [row for f in futures.values() if (row := f.result()) is not None]
  rows, refused = tabulated(rows)
  for reason in refused:
    print(f'Left out of the tables: {reason}', flush=True)
  if pairs:
    print('\n' + comparison_table(rows, pairs))
    return
  memory = {}
  if FLAGS.memory:
    for name in names:
      memory[name] = step_memory_bytes(run_config(root, name, seeds[0], steps, budget=budget, lr=rate_of(name)))
  markdown = (headline_table(rows, names) + '\n\nEvery run, mean ± std over its seeds:\n\n' + table(rows, names, memory)
              + '\n\nPer seed, against the control:\n\n' + paired_table(rows, names))
  footer = (f'\n\n{len(rows)} runs, seeds {",".join(map(str, seeds))}, ' + (
      f'{FLAGS.jobs} at a time: {(time.time() - began) / 60:.1f} min wall.' if FLAGS.train
      else f'tabulated from {os.path.relpath(store, ROOT)} (--notrain).'))
  print('\n' + markdown + footer)
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      f.write(markdown + footer + '\n')
  if FLAGS.update_results:
    report.draw_verdicts(budget)
    report.write()
    print(f'Wrote {os.path.relpath(report.RESULTS_MD, ROOT)} and '
          f'{os.path.relpath(report.verdict_plot_path(budget), ROOT)}.')


if __name__ == '__main__':
  define_flags()
  app.run(main)
