#!/usr/bin/env python
"""The summary of a `python -m pytest --compile-report=DIR` run (tests/compile_report.py): CPU seconds, jax's
tracing, lowering and XLA compile seconds, compiles and persistent-cache hits, per test file or per test, costliest
first, as a markdown table.

  python tools/summarize_compile_report.py DIR [--by=file|test] [--top=N]
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import sys

COLUMNS = ('cpu_s', 'trace_s', 'lower_s', 'compile_s', 'compiles', 'cache_hits', 'cache_misses')


def read_rows(directory: str) -> list[dict]:
  """Every row of DIR/*.jsonl; SystemExit naming DIR when it holds none."""
  rows = []
  for path in sorted(glob.glob(os.path.join(directory, '*.jsonl'))):
    with open(path) as f:
      rows += [json.loads(line) for line in f if line.strip()]
  if not rows:
    raise SystemExit(f'{directory}: no rows (*.jsonl); run python -m pytest --compile-report={directory} first')
  return rows


def totals_by(rows: list[dict], by: str) -> dict[str, collections.Counter]:
  """{test file or test id: the sum of each column over its rows}."""
  groups: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  for row in rows:
    name = row['test'].split('::')[0] if by == 'file' else row['test']
    groups[name].update({k: row.get(k, 0) for k in COLUMNS})
    groups[name]['tests'] += 1
  return groups


def table(groups: dict[str, collections.Counter], top: int) -> str:
  """Markdown: the `top` costliest groups by CPU seconds, then every group's total."""
  ordered = sorted(groups.items(), key=lambda kv: -kv[1]['cpu_s'])
  total = sum(groups.values(), collections.Counter())
  header = ('| what | tests | ' + ' | '.join(COLUMNS) + ' |', '|---' * (len(COLUMNS) + 2) + '|')
  return '\n'.join([*header, *(table_row(name, c) for name, c in ordered[:top]), table_row('**all**', total)])


def table_row(name: str, sums: collections.Counter) -> str:
  """One markdown row: seconds to a tenth, counts whole."""
  cells = (f'{sums[k]:.1f}' if k.endswith('_s') else f'{sums[k]}' for k in COLUMNS)
  return f'| {name} | {sums["tests"]} | ' + ' | '.join(cells) + ' |'


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('directory')
  parser.add_argument('--by', choices=('file', 'test'), default='file')
  parser.add_argument('--top', type=int, default=30)
  args = parser.parse_args(argv)
  print(table(totals_by(read_rows(args.directory), args.by), args.top))


if __name__ == '__main__':
  main(sys.argv[1:])
