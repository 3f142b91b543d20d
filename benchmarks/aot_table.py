#!/usr/bin/env python
"""The rows `benchmarks/aot.py` printed, as the markdown table of benchmarks/RESULTS.md.

  python benchmarks/aot_table.py benchmarks/results/aot/2026-11-25_bf16_scan.jsonl [MORE.jsonl ...]

One table row per JSON line, in the order given. A config that did not fit shows the temporaries the compiler asked
for against what the chip had left; its FLOPs and estimate are '-'.
"""
from __future__ import annotations

import json
import sys

HEADER = ('| config | topology (chips) | model, dtype | global batch (micro) | blocks, remat policy | '
          'HBM per chip: args / temps / total GiB | fits | TFLOPs per chip | collectives per chip, MB | '
          'roofline estimate: step s / MFU / samples/s | compile s |')
DTYPES = {'bfloat16': 'bf16', 'float32': 'fp32'}


def markdown_row(row: dict) -> str:
  """One aot.py JSON row as a table row (the columns of HEADER)."""
  hbm = row['hbm_per_chip']
  if 'total_gib' in hbm:
    memory = (f"{hbm['arguments_gib']:.2f} / {hbm['temporaries_gib']:.2f} / {hbm['total_gib']:.2f} "
              f"({hbm['fraction_of_chip']:.0%} of {hbm['chip_gib']})")
  else:  # the compiler refused: what it asked for, and what was left
    memory = f"temporaries alone {hbm['temporaries_gib']:.1f} > {hbm['available_gib']:.1f} available"
  roofline = row.get('roofline_estimate')
  estimate = (f"{roofline['step_seconds']:.3f} / {roofline['mfu']:.2f} / {roofline['samples_per_sec']:.0f}"
              if roofline else '-')
  flops = f"{row['flops_per_chip'] / 1e12:.1f}" if row.get('flops_per_chip') else '-'
  collectives = ', '.join(f'{kind} {size / 1e6:.0f}'
                          for kind, size in row.get('collective_bytes_per_chip', {}).items()) or '-'
  micro = f" ({row['micro_batch']})" if row.get('micro_batch') else ''
  blocks = 'scan' if row['scan_layers'] else 'unrolled'
  return (f"| `{row['config']}` | {row['topology']} ({row['chips']}) | {row.get('model', '')}, "
          f"{DTYPES.get(row['dtype'], row['dtype'])} | {row['global_batch']}{micro} | {blocks}, remat "
          f"{row['remat'] or 'none'} | {memory} | {'yes' if row['fits'] else '**no**'} | {flops} | {collectives} | "
          f"{estimate} | {row['compile_seconds']:.0f} |")


def table(rows: list[dict]) -> str:
  return '\n'.join([HEADER, '|' + '---|' * HEADER.count(' | ') + '---|', *map(markdown_row, rows)])


def main(paths: list[str]) -> None:
  if not paths:
    sys.exit(__doc__)
  rows = []
  for path in paths:
    with open(path) as f:
      rows += [json.loads(line) for line in f if line.startswith('{')]
  print(table(rows))


if __name__ == '__main__':
  main(sys.argv[1:])
