"""The host memory a run holds outside the devices, printed at start and checked against the machine before the
eval sets load and the step compiles, as the compiled step's own memory is (training/step.py `check_memory`).

Two kinds of parts: memory-mapped files (the webdataset index, the teacher table; data/sources/webdataset_tars.py,
data/loading/teacher_table.py), held once per host in the page cache whatever the number of processes and grain workers;
and arrays each process holds itself (the evaluation sets' images, estimated from the config by evalsets/budget.py's
`host_memory`).

The same figures are estimated before launch from sample counts (`webdataset_index_bytes`, `teacher_table_bytes`;
benchmarks/run_needs.py) and measured at start from the files (data/formats, data/loading/teacher_table.py).
"""
from __future__ import annotations

import dataclasses

from vlp_jax.data.sources import webdataset_tars as webdataset
from vlp_jax.errors import ConfigError
from vlp_jax.hardware import gib


@dataclasses.dataclass(frozen=True)
class HostMemory:
  """shared: {part: bytes} mapped once per host; per_process: {part: bytes} held by each process; not_counted: parts
  whose size is unknown before they load (named in `describe`, counted 0)."""
  shared: dict[str, int]
  per_process: dict[str, int]
  not_counted: tuple[str, ...] = ()

  def total(self, processes_per_host: int = 1) -> int:
    """Bytes the host holds for `processes_per_host` processes of the run."""
    return sum(self.shared.values()) + processes_per_host * sum(self.per_process.values())

  def describe(self, processes_per_host: int = 1) -> str:
    """'1.2 GiB held outside the devices (webdataset index 1.0 GiB, mapped once per host; eval sets 0.2 GiB per
    process)'."""
    parts = [f'{name} {gib(size)}, mapped once per host' for name, size in self.shared.items()]
    parts += [f'{name} {gib(size)} per process' for name, size in self.per_process.items()]
    parts += [f'{name}: size unknown before loading, not counted' for name in self.not_counted]
    processes = f' by {processes_per_host} processes' if processes_per_host > 1 else ''
    return (f'{gib(self.total(processes_per_host))} held outside the devices{processes}'
            + (f' ({"; ".join(parts)})' if parts else ''))


def shortfall(memory: HostMemory, host_total: int, processes_per_host: int = 1) -> str | None:
  """Why `memory` cannot be held on a host of `host_total` bytes, or None when it fits."""
  needed = memory.total(processes_per_host)
  if needed <= host_total:
    return None
  return f'host memory: the run needs {memory.describe(processes_per_host)}, and this machine has {gib(host_total)}'


def check(memory: HostMemory, host_total: int, processes_per_host: int = 1) -> str:
  """The line to print at start; ConfigError (exit 2) naming every figure when `memory` cannot fit the host."""
  problem = shortfall(memory, host_total, processes_per_host)
  if problem:
    raise ConfigError(f'{problem}. Evaluate fewer sets (config.eval.datasets) or fewer examples '
                      '(config.data.eval_max_examples, config.data.probe_train_examples), give each process fewer '
                      'shards (config.data.shards_by_process) or run on hosts with more memory')
  return memory.describe(processes_per_host)


def webdataset_index_bytes(samples: int, key_bytes: int) -> int:
  """Bytes of the webdataset index of `samples` samples whose keys are `key_bytes` long: one row of offsets and sizes
  and one fixed-width key per sample (data/sources/webdataset_tars.py's ShardIndex), memory-mapped once per host."""
  return samples * (webdataset.INDEX_ROW_BYTES + key_bytes)


def teacher_table_bytes(samples: int, dim: int, key_bytes: int) -> int:
  """Bytes of a teacher table of `samples` float32 embeddings of width `dim` (data/loading/teacher_table.py's
  prepare_table): the embeddings, the sorted keys and one int64 row number per key, memory-mapped once per host."""
  return samples * (dim * 4 + key_bytes + 8)
