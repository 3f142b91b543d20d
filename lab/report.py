"""benchmarks/RESULTS.md, written from the stored rows and the readings beside them:

  python -m lab.report            # print it
  python -m lab.report --write    # write benchmarks/RESULTS.md
  python -m lab.report --check    # exit 1 (naming the first differing line) if the committed file is not what it writes

The file is the readings of lab/readings/, in the order of READINGS, each a short prose file that points at its rows.
A line `<!-- generated: NAME -->` in a reading stands for the table GENERATED[NAME] renders from the rows: the methods
tables of each budget, the change between the budgets and the speed levers' from lab/results/methods{,_x4}/
(lab/tables.py, the tables `python -m lab.methods --notrain` prints), the compiled-for-TPU table from
benchmarks/results/aot/ (benchmarks/aot_table.py), and the learning curves' verdicts (lab/curves.py: `curves_table`,
which no reading shows yet). The plots are drawn from the same rows by `--plots` (lab/results/methods_verdicts*.png).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from benchmarks import aot_table
from lab import curves
from lab.catalogue import DEV_SEEDS, HELD_OUT_SEEDS, ROOT, RUNS, SECOND_BUDGET, expand
from lab.runner import STORE, of_budget, planned_runs, stored_row
from lab.statistics import tabulated
from lab.tables import budget_change_table, headline_table, results_block, verdict_entries, verdict_figure

RESULTS_MD = os.path.join(ROOT, 'benchmarks', 'RESULTS.md')
READINGS_DIR = os.path.join(ROOT, 'lab', 'readings')
# the sections of RESULTS.md, in order: lab/readings/<name>.md
READINGS = ('intro', 'methods', 'second_budget', 'verdicts', 'saco', 'slip', 'cosmos', 'zerovl', 'siglip2',
            'captions', 'speed_tpu', 'speed_cpu', 'speed_gpu', 'speed_gpu_profile', 'mfu', 'input_pipeline')
GENERATED_LINE = re.compile(r'^<!-- generated: (\w+) -->$', re.MULTILINE)
AOT_ROWS = os.path.join(ROOT, 'benchmarks', 'results', 'aot')


def budget_plan(budget: int = 1) -> tuple[list[str], list[int], str]:
  """(run names, seeds, store) of the methods table of `budget`, as the commands in its reading train it."""
  if budget == 1:
    return expand(['table']), list(DEV_SEEDS + HELD_OUT_SEEDS), STORE
  return expand(['table_budget'], compute_controls=False), list(HELD_OUT_SEEDS), of_budget(STORE, budget)


def stored_rows(budget: int = 1) -> tuple[list[dict], list[str], list[int]]:
  """The stored rows a table of `budget` reads (each teacher's before its method's, seed by seed, as the runner
  collects them), its run names and its seeds."""
  names, seeds, store = budget_plan(budget)
  rows = [row for key in planned_runs(names, seeds) if (row := stored_row(store, *key)) is not None]
  return tabulated(rows)[0], names, seeds


def methods_tables(budget: int = 1) -> str:
  rows, names, seeds = stored_rows(budget)
  return results_block(rows, names, seeds, budget)


def speed_levers_table() -> str:
  """The headline table of the speed levers (bf16, patch dropout) against CLIP, from the first budget's store."""
  names, seeds = expand(['speed']), list(DEV_SEEDS + HELD_OUT_SEEDS)
  rows = [row for key in planned_runs(names, seeds) if (row := stored_row(STORE, *key)) is not None]
  return headline_table(tabulated(rows)[0], names)


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.startswith('{')]


def aot_rows() -> list[dict]:
  """The pod configs compiled by libtpu in bf16 (2026-11-25 and 26): every row of the three files, the 2026-11-25
  zerovl_multisource rows left out (they were compiled again, alone, on 2026-11-26)."""
  first = [row for row in read_jsonl(os.path.join(AOT_ROWS, '2026-11-25_bf16_scan.jsonl'))
           if row['config'] != 'zerovl_multisource']
  later = read_jsonl(os.path.join(AOT_ROWS, '2026-11-26_cosmos_compile_and_zerovl.jsonl'))
  return first + read_jsonl(os.path.join(AOT_ROWS, '2026-11-25_slip_memory.jsonl')) + later


def aot_markdown() -> str:
  """aot_table's table of `aot_rows`; the row compiled before COSMOS's batched pairwise loss says so."""
  lines = aot_table.table(aot_rows()).split('\n')
  for k, row in enumerate(aot_rows()):
    if row.get('commit') == 'c8b97fe':
      lines[2 + k] = lines[2 + k].replace('`cosmos_cc3m`', '`cosmos_cc3m` (at c8b97fe, before the batched pairwise loss)')
  return '\n'.join(lines)


def budget_change() -> str:
  """The headline pairs of the second budget at 1x and at SECOND_BUDGET x on the held-out seeds, and the change."""
  pairs = [(name, RUNS[name].control or RUNS[name].baseline)
           for name in expand(['table_budget'], compute_controls=False) if RUNS[name].metrics]
  return budget_change_table(stored_rows(1)[0], stored_rows(SECOND_BUDGET)[0], pairs, SECOND_BUDGET)


GENERATED = {
    'methods_tables': lambda: methods_tables(1),
    'methods_tables_x4': lambda: methods_tables(SECOND_BUDGET),
    'aot_table': aot_markdown,
    'speed_levers': speed_levers_table,
    'budget_change': budget_change,
    # the learning-curve protocol's verdicts from lab/results/curves/held_out_x8/ (no reading shows it before its rows)
    'curves_table': lambda: curves.curves_table(curves.held_out_rows()),
}


def reading(name: str) -> str:
  with open(os.path.join(READINGS_DIR, f'{name}.md')) as f:
    return f.read().strip('\n')


def render() -> str:
  """The text of benchmarks/RESULTS.md: every reading, its generated lines replaced by their tables."""
  sections = [GENERATED_LINE.sub(lambda m: GENERATED[m.group(1)](), reading(name)) for name in READINGS]
  return '\n\n'.join(sections) + '\n'


def verdict_plot_path(budget: int = 1) -> str:
  """lab/results/methods_verdicts[_x<budget>].png, the plot of the verdicts RESULTS.md shows."""
  return os.path.join(ROOT, 'lab', 'results', 'methods_verdicts' + (f'_x{budget}' if budget != 1 else '') + '.png')


def draw_verdicts(budget: int = 1) -> None:
  """Draw the verdicts of `budget`'s stored rows into verdict_plot_path(budget)."""
  rows, names, _ = stored_rows(budget)
  entries = verdict_entries(rows, names)
  if entries:
    figure = verdict_figure(entries, f'The methods table{f", {budget}x the steps" if budget != 1 else ""}: '
                                     'each method against its controls on its headline metric')
    figure.savefig(verdict_plot_path(budget), dpi=100, bbox_inches='tight')


def write(path: str = RESULTS_MD) -> None:
  with open(path + '.tmp', 'w') as f:
    f.write(render())
  os.replace(path + '.tmp', path)


def first_difference(expected: str, actual: str) -> str | None:
  """'line N: ...' where `actual` first departs from `expected`, None where they are equal."""
  if expected == actual:
    return None
  old, new = actual.split('\n'), expected.split('\n')
  k = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
  return f'line {k + 1}: committed {old[k] if k < len(old) else "<end>"!r}, generated {new[k] if k < len(new) else "<end>"!r}'


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--write', action='store_true', help='write benchmarks/RESULTS.md')
  parser.add_argument('--check', action='store_true', help='exit 1 if benchmarks/RESULTS.md is not what is written')
  parser.add_argument('--plots', action='store_true', help='also redraw the verdict plots from the rows')
  args = parser.parse_args()
  if args.plots:
    for budget in (1, SECOND_BUDGET):
      draw_verdicts(budget)
  if args.check:
    with open(RESULTS_MD) as f:
      difference = first_difference(render(), f.read())
    if difference:
      sys.exit(f'benchmarks/RESULTS.md is not what `python -m lab.report --write` writes: {difference}')
  elif args.write:
    write()
  else:
    print(render(), end='')


if __name__ == '__main__':
  main()
