"""Random access to the records of a list of ArrayRecord shards, with the shard each record came from."""
from __future__ import annotations

import concurrent.futures

import grain
import numpy as np
from array_record.python.array_record_module import ArrayRecordReader


class ShardRecords:
  """Random access to the records of several ArrayRecord shards that also says where each came from:
  index -> (shard id, record bytes). `shard_ids[k]` is the id reported for `paths[k]`."""

  def __init__(self, paths: list[str], shard_ids: list[int] | None = None):
    self._data = grain.sources.ArrayRecordDataSource(list(paths))
    with concurrent.futures.ThreadPoolExecutor(max(1, min(16, len(paths)))) as pool:  # remote file systems
      lengths = list(pool.map(lambda p: ArrayRecordReader(p).num_records(), paths))
    self._ends = np.cumsum(lengths)
    self._shard_ids = np.asarray(range(len(paths)) if shard_ids is None else shard_ids, np.int32)

  def __len__(self) -> int:
    return len(self._data)

  def shard_ranges(self) -> list[tuple[int, int]]:
    """[(start, end)] of each shard's records, in the order of `paths`."""
    starts = np.concatenate([[0], self._ends[:-1]])
    return list(zip(starts.tolist(), self._ends.tolist()))

  def _shards(self, indices) -> np.ndarray:
    return self._shard_ids[np.searchsorted(self._ends, indices, side='right')]

  def __getitem__(self, index: int) -> tuple[int, bytes]:
    return int(self._shards(int(index))), self._data[index]

  def __getitems__(self, indices) -> list[tuple[int, bytes]]:
    return list(zip(self._shards(np.asarray(indices)).tolist(), self._data.__getitems__(indices)))
