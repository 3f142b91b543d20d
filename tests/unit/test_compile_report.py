"""The suite's compile report (tests/compile_report.py, tools/summarize_compile_report.py): a test's row counts the programs it
compiled and the ones the persistent cache gave back, and the summary adds rows up by file."""
import json
import os
import uuid

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compile_report import CompileReport
from tools.summarize_compile_report import table, totals_by


class _Item:
  nodeid = 'tests/unit/test_x.py::test_y'


def _report_one_test(directory, body):
  """Run `body` as the test CompileReport times; returns the row it wrote."""
  report = CompileReport(str(directory))
  try:
    hook = report.pytest_runtest_protocol(_Item(), None)
    next(hook)
    body()
    with pytest.raises(StopIteration):
      next(hook)
  finally:
    report.close()
  (row,) = [json.loads(line) for line in open(report.path)]
  return row


def test_a_row_counts_compiles_and_persistent_cache_hits(tmp_path):
  assert os.environ.get('JAX_COMPILATION_CACHE_DIR'), 'conftest sets the session cache'
  offset = uuid.uuid4().int % 10**6 / 7  # a program no other test compiled

  def body():
    x = np.arange(4.0)  # numpy: no eager jax op compiles
    jax.jit(lambda v: v * 3 + offset)(x).block_until_ready()  # traced, lowered, compiled, written to the cache
    jax.jit(lambda v: v * 3 + offset)(x).block_until_ready()  # a new function, the same program: from the cache
  row = _report_one_test(tmp_path, body)
  assert row['test'] == _Item.nodeid and row['cpu_s'] > 0
  assert row['compiles'] == 2 and row['cache_misses'] == 1 and row['cache_hits'] == 1, row
  assert row['compile_s'] > 0 and row['trace_s'] > 0 and row['lower_s'] > 0
  # closed: another program compiled now is not counted
  jax.jit(lambda v: v * 5 + offset)(jnp.arange(4.0)).block_until_ready()
  assert len(open(os.path.join(tmp_path, f'{os.getpid()}.jsonl')).readlines()) == 1


def test_the_summary_adds_up_rows_by_file_costliest_first():
  rows = [{'test': 'a.py::t1', 'cpu_s': 1.0, 'compiles': 2}, {'test': 'a.py::t2', 'cpu_s': 2.0, 'compiles': 1},
          {'test': 'b.py::t', 'cpu_s': 5.0, 'compiles': 0}]
  groups = totals_by(rows, 'file')
  assert (groups['a.py']['cpu_s'], groups['a.py']['compiles'], groups['a.py']['tests']) == (3.0, 3, 2)
  lines = table(groups, top=1).splitlines()
  assert lines[2].startswith('| b.py | 1 | 5.0 |') and lines[3].startswith('| **all** | 3 | 8.0 |')
  assert len(lines) == 4  # header, rule, the top one, the total
