"""Random access to the records of a list of ArrayRecord shards, with the shard each record came from; and the
bounded set of open files that every shard reader shares (`OpenHandles`), so that a run over 100k shards keeps a
few dozen files open, not one per shard it has read."""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import resource
import threading
from typing import Any, Callable, Hashable, Iterator

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

# Open shard files per reader object (each grain worker process, and each source of the mixing modes, has its own):
# a 256th of the soft open-files limit, from 32 (a limit of 1,024 or below: 16 workers keep half of it free) to 1,024
# (16 workers of 4 sources each keep 64k files under the common 1M hard limit). Under a global shuffle over more shards
# than that, most reads open their shard: a few microseconds for a tar, about 0.5 ms for an ArrayRecord file (it reads
# its footer), the price of not running out of files.
MIN_OPEN_SHARDS, MAX_OPEN_SHARDS = 32, 1024
# grain's own options for random access (one record per read: no readahead), as its ArrayRecordDataSource
_READER_OPTIONS = 'readahead_buffer_size:0'


def raise_open_files_limit() -> tuple[int, int]:
  """Raise this process's soft limit of open files (RLIMIT_NOFILE) to its hard limit; worker processes started later
  inherit it. Returns (soft, hard) as they are now. A run reads many files at once (shards, checkpoints, sockets),
  and a soft limit of 1,024 is common where the hard one is far higher."""
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  if hard == resource.RLIM_INFINITY or soft < hard:
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    try:
      resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # some systems cap it lower (macOS: OPEN_MAX): keep the soft limit
      pass
  return resource.getrlimit(resource.RLIMIT_NOFILE)


def open_shards_budget(soft: int | None = None) -> int:
  """How many shard files one reader keeps open, from the soft open-files limit `soft` (None: this process's; see
  MIN_OPEN_SHARDS)."""
  soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if soft is None else soft
  limit = MAX_OPEN_SHARDS * 256 if soft == resource.RLIM_INFINITY else soft
  return int(np.clip(limit // 256, MIN_OPEN_SHARDS, MAX_OPEN_SHARDS))


class OpenHandles:
  """At most `capacity` open handles (default: `open_shards_budget()`), by key, least recently used closed first:
  `with handles.use(key) as h:` opens the key's handle (`open_handle(key)`) or reuses it. A handle in use by another thread is never closed under
  it: past capacity, it is closed when its last user is done. Thread-safe; `close_all()` closes every handle."""

  def __init__(self, open_handle: Callable[[Hashable], Any], close_handle: Callable[[Any], None],
               capacity: int | None = None):
    capacity = open_shards_budget() if capacity is None else capacity
    if capacity < 1:
      raise ValueError(f'OpenHandles needs a capacity of at least 1, got {capacity}')
    self._open, self._close, self.capacity = open_handle, close_handle, capacity
    self._handles: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()  # least recently used first
    self._users: collections.Counter[Hashable] = collections.Counter()
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return len(self._handles)

  @contextlib.contextmanager
  def use(self, key: Hashable) -> Iterator[Any]:
    handle = self._take(key)
    if handle is None:
      opened = self._open(key)  # outside the lock: a slow open (a remote file) holds up no other thread
      handle = self._take(key, opened)
      if handle is not opened:  # another thread opened it meanwhile: keep theirs
        self._close(opened)
    try:
      yield handle
    finally:
      with self._lock:
        self._users[key] -= 1
        if not self._users[key]:
          del self._users[key]
        self._evict()

  def _take(self, key: Hashable, opened: Any = None) -> Any:
    """The open handle of `key`, now in use (`opened` stored as it when there is none); None when there is none and
    nothing was opened."""
    with self._lock:
      handle = self._handles.get(key)
      if handle is None:
        if opened is None:
          return None
        handle = self._handles[key] = opened
      self._handles.move_to_end(key)
      self._users[key] += 1
      self._evict()
      return handle

  def _evict(self) -> None:
    """Close the least recently used handles that no thread is using until at most `capacity` are open."""
    idle = [k for k in self._handles if k not in self._users]
    while len(self._handles) > self.capacity and idle:
      self._close(self._handles.pop(idle.pop(0)))

  def close_all(self) -> None:
    with self._lock:
      while self._handles:
        self._close(self._handles.popitem(last=False)[1])
      self._users.clear()


def _open_array_record(path: str) -> ArrayRecordReader:
  return ArrayRecordReader(path, options=_READER_OPTIONS, file_reader_buffer_size=32768)


def _num_records(path: str) -> int:
  reader = ArrayRecordReader(path)
  try:
    return reader.num_records()
  finally:
    reader.close()


class ShardRecords:
  """Random access to the records of several ArrayRecord shards that also says where each came from:
  index -> (shard id, record bytes). `shard_ids[k]` is the id reported for `paths[k]`. At most
  `open_shards_budget()` shard files are open at once (OpenHandles); picklable: a grain worker opens its own."""

  def __init__(self, paths: list[str], shard_ids: list[int] | None = None):
    self._paths = list(paths)
    with concurrent.futures.ThreadPoolExecutor(max(1, min(16, len(paths)))) as pool:  # remote file systems
      lengths = list(pool.map(_num_records, paths))
    self._ends = np.cumsum(lengths).astype(np.int64)
    self._shard_ids = np.asarray(range(len(paths)) if shard_ids is None else shard_ids, np.int32)
    self._readers = self._new_readers()

  def _new_readers(self) -> OpenHandles:
    return OpenHandles(lambda k: _open_array_record(self._paths[k]), lambda reader: reader.close())

  def __getstate__(self):
    return {k: v for k, v in self.__dict__.items() if k != '_readers'}

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._readers = self._new_readers()

  def __del__(self):
    if hasattr(self, '_readers'):
      self._readers.close_all()

  def __len__(self) -> int:
    return int(self._ends[-1]) if len(self._ends) else 0

  def shard_ranges(self) -> list[tuple[int, int]]:
    """[(start, end)] of each shard's records, in the order of `paths`."""
    starts = np.concatenate([[0], self._ends[:-1]]).astype(np.int64)
    return list(zip(starts.tolist(), self._ends.tolist()))

  def _locate(self, index: int) -> tuple[int, int]:
    """(position of the shard in `paths`, position of the record in it)."""
    if not 0 <= index < len(self):
      raise IndexError(f'record {index} is out of range: the shards hold {len(self)} records')
    k = int(np.searchsorted(self._ends, index, side='right'))
    return k, index - (int(self._ends[k - 1]) if k else 0)

  def __getitem__(self, index: int) -> tuple[int, bytes]:
    k, position = self._locate(int(index))
    with self._readers.use(k) as reader:
      record = reader.read([position])[0]
    return int(self._shard_ids[k]), record

  def __getitems__(self, indices) -> list[tuple[int, bytes]]:
    return [self[i] for i in indices]
