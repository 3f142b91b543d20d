"""The one ArrayRecord shard writer: `records.write_shards` (the embedded dataset, tfds splits) and the converter
(data/ingest/converter.py) both write through `ShardWriter`.

Shards are named `{prefix}-{i:05d}-of-{n:05d}.array_record`. Each is written under a hidden temporary name
(`.{prefix}-{i:05d}.array_record.tmp`, which `*.array_record` globs do not see) and renamed into place by `publish`
once the number of shards is known, so a crash never leaves a shard under a final name. Files are written with
`group_size:1` so that grain can read any record at random. The bytes of a shard depend only on its records.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Iterable

from array_record.python.array_record_module import ArrayRecordWriter

WRITER_OPTIONS = 'group_size:1'  # any record can be read at random


def shard_name(prefix: str, index: int, count: int) -> str:
  """The final file name of shard `index` of `count`."""
  return f'{prefix}-{index:05d}-of-{count:05d}.array_record'


def temporary_shard_path(directory: str, prefix: str, index: int) -> str:
  """Where shard `index` is written before `publish` renames it (hidden: its name starts with a dot)."""
  return os.path.join(directory, f'.{prefix}-{index:05d}.array_record.tmp')


def is_shard_file(name: str, prefixes: Iterable[str]) -> bool:
  """Whether `name` is a shard, or a temporary shard left by a crash, that this writer writes with one of
  `prefixes`."""
  return any(re.fullmatch(rf'\.?{re.escape(p)}-\d{{5,}}(-of-\d{{5,}}\.array_record|\.array_record\.tmp)', name)
             for p in prefixes)


class ShardWriter:
  """Serialized records into numbered temporary shards in `directory` (see the module docstring).

  `write` starts the next shard when there is none yet or the current one holds `per_shard` records (None: only
  `new_shard` starts one, which also makes a shard with no records). `paths` are the temporary shards, in order.
  As a context manager, leaving closes the last shard, and leaving on an exception removes every temporary shard.
  """

  def __init__(self, directory: str, prefix: str, per_shard: int | None = None):
    self.directory, self.prefix, self.per_shard = directory, prefix, per_shard
    self.paths: list[str] = []
    self._writer, self._count = None, 0

  def new_shard(self) -> None:
    self._close_current()
    self.paths.append(temporary_shard_path(self.directory, self.prefix, len(self.paths)))
    self._writer, self._count = ArrayRecordWriter(self.paths[-1], WRITER_OPTIONS), 0

  def write(self, record: bytes) -> None:
    if self._writer is None or self._count == self.per_shard:
      self.new_shard()
    self._writer.write(record)
    self._count += 1

  def _close_current(self) -> None:
    writer, self._writer = self._writer, None
    if writer is not None:
      writer.close()

  def close(self) -> list[str]:
    """Closes the current shard; the temporary paths."""
    self._close_current()
    return self.paths

  def discard(self) -> None:
    """Closes and removes every temporary shard (after a failure)."""
    for path in self.close():
      with contextlib.suppress(OSError):
        os.remove(path)

  def __enter__(self) -> ShardWriter:
    return self

  def __exit__(self, kind, error, traceback) -> None:
    if kind is None:
      self.close()
    else:
      self.discard()


def publish(temporary: list[str], directory: str, prefix: str) -> list[str]:
  """Renames the temporary shards (in order) to their final names in `directory`; the final paths."""
  paths = [os.path.join(directory, shard_name(prefix, i, len(temporary))) for i in range(len(temporary))]
  for source, path in zip(temporary, paths):
    os.replace(source, path)
  return paths
