#!/usr/bin/env python
"""Whether two training workdirs hold the same run, bit for bit: every metrics.jsonl record (timings left out:
`perf/*` and `time`) and the variables of every checkpoint.

  python tools/compare_runs.py WORKDIR_A WORKDIR_B

Either workdir may be on an object store (gs://bucket/run).

Prints one line per check and exits 0 when everything is identical, 1 otherwise. For refactors that must not change
behaviour: train the same config before and after, then compare.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from vlp_jax import paths  # noqa: E402
from vlp_jax.checkpoint_files import load_variables  # noqa: E402


def metric_records(workdir: str) -> list[dict]:
  """The records of metrics.jsonl without the timings, which differ between any two runs."""
  lines = paths.read_text(paths.join(workdir, 'metrics.jsonl')).splitlines()
  return [{k: v for k, v in json.loads(line).items() if not k.startswith('perf/') and k != 'time'} for line in lines]


def checkpoint_steps(workdir: str) -> list[int]:
  directory = paths.join(workdir, 'checkpoints')
  return sorted(int(name) for name in paths.listdir(directory) if name.isdigit()) if paths.isdir(directory) else []


def trees_equal(a, b) -> bool:
  """Same structure, shapes, dtypes and values."""
  return jax.tree.structure(a) == jax.tree.structure(b) and all(
      x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def compare(a: str, b: str) -> list[tuple[str, bool]]:
  """[(what was compared, identical)]."""
  records_a, records_b = metric_records(a), metric_records(b)
  checks = [(f'metrics.jsonl: {len(records_a)} and {len(records_b)} records', records_a == records_b)]
  if records_a != records_b:
    for x, y in zip(records_a, records_b):
      if x != y:
        keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
        checks.append((f'  first differing record: step {x.get("step")}, keys {keys[:8]}', False))
        break
  steps_a, steps_b = checkpoint_steps(a), checkpoint_steps(b)
  checks.append((f'checkpoint steps {steps_a} and {steps_b}', steps_a == steps_b))
  for step in sorted(set(steps_a) & set(steps_b)):
    params_a, state_a = load_variables(paths.join(a, 'checkpoints', str(step)))
    params_b, state_b = load_variables(paths.join(b, 'checkpoints', str(step)))
    size = sum(x.size for x in jax.tree.leaves(params_a))
    checks.append((f'checkpoint {step}: {size} parameters', trees_equal(params_a, params_b)))
    checks.append((f'checkpoint {step}: model state', trees_equal(state_a, state_b)))
  return checks


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print(__doc__, file=sys.stderr)
    return 2
  checks = compare(*argv)
  for what, same in checks:
    print(f'{"identical" if same else "DIFFERENT"}  {what}')
  return 0 if all(same for _, same in checks) else 1


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
