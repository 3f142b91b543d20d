"""Where the suite's time goes: per test, the CPU seconds of the test process and jax's compile events (tracing,
lowering to StableHLO, XLA's compile, persistent-cache hits and misses), one JSON line per test.

  python -m pytest --compile-report=DIR [pytest args]   # conftest registers `CompileReport` with the option
  python tools/summarize_compile_report.py DIR [--by=file|test] [--top=N]

Each process (an xdist worker or pytest itself) appends to DIR/<pid>.jsonl. Only the test processes are counted: the
commands a test starts compile in processes of their own, so a test that mostly waits on a subprocess shows little
CPU here. The compile events are wall seconds as jax records them (a loaded machine inflates them); `compile_s` and
`compiles` include the programs the persistent cache gave back (`cache_hits`), so `compiles - cache_hits` ran XLA.
`cpu_s` is the process's CPU time, every thread, from the start of the test's setup to the end of its teardown.
"""
from __future__ import annotations

import collections
import json
import os
import time

import pytest
from jax import monitoring

DURATIONS = {'/jax/core/compile/jaxpr_trace_duration': 'trace_s',
             '/jax/core/compile/jaxpr_to_mlir_module_duration': 'lower_s',
             '/jax/core/compile/backend_compile_duration': 'compile_s'}
COUNTS = {'/jax/compilation_cache/cache_hits': 'cache_hits', '/jax/compilation_cache/cache_misses': 'cache_misses'}
COMPILES = 'compiles'  # programs asked of XLA: the persistent cache's hits are among them, its misses compiled


class CompileReport:
  """A pytest plugin that writes one row per test to DIR/<pid>.jsonl: {'test', 'cpu_s', 'trace_s', 'lower_s',
  'compile_s', 'compiles', 'cache_hits', 'cache_misses'}."""

  def __init__(self, directory: str):
    os.makedirs(directory, exist_ok=True)
    self.path = os.path.join(directory, f'{os.getpid()}.jsonl')
    self.totals: collections.Counter = collections.Counter()
    # these add into `totals`, of which each test reads the difference; `close` removes them
    monitoring.register_event_duration_secs_listener(self._on_duration)
    monitoring.register_event_listener(self._on_event)

  def close(self) -> None:
    monitoring.unregister_event_duration_listener(self._on_duration)
    monitoring.unregister_event_listener(self._on_event)

  def pytest_unconfigure(self, config):
    self.close()

  def _on_duration(self, event: str, seconds: float, **_) -> None:
    if event in DURATIONS:
      self.totals[DURATIONS[event]] += seconds
      if DURATIONS[event] == 'compile_s':
        self.totals[COMPILES] += 1

  def _on_event(self, event: str, **_) -> None:
    if event in COUNTS:
      self.totals[COUNTS[event]] += 1

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_protocol(self, item, nextitem):
    before, cpu = self.totals.copy(), time.process_time()
    yield
    row = {'test': item.nodeid, 'cpu_s': round(time.process_time() - cpu, 3)}
    for key in (*DURATIONS.values(), COMPILES, *COUNTS.values()):
      value = self.totals[key] - before[key]
      row[key] = round(value, 3) if isinstance(value, float) else value
    with open(self.path, 'a') as f:
      f.write(json.dumps(row) + '\n')
