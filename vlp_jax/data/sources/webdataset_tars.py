"""Training straight from webdataset tar shards (img2dataset's layout: `KEY.jpg|png|webp`, `KEY.txt`, optional
`KEY.json`), with no conversion pass.

Each shard's tar headers are scanned once (seeks, no image is read) into a compact index of where every sample's
members are, cached under the data cache directory; training then reads samples at random by offset, like records of
an ArrayRecord shard. So the whole pipeline stays random access (data/loading/pipeline.py): one global shuffle over
every shard, the mixing modes, each process's block of every global batch, and a checkpointed iterator position that
resumes bit for bit. The index holds about 40 bytes per sample (400 MB for 10M samples), written once to a file and
memory-mapped, so that a host holds one copy whatever its number of grain workers.

Bad samples are not errors: a sample without an image member is 'missing_image', without its caption member
'missing_caption'; the pipeline replaces them and counts them by reason, as it does bad records. A truncated tar
(cut inside a member, inside a header, or between members before tar's end-of-archive block) is named on stdout when
indexed and counts one 'corrupt_tar' for what it lost: its cut sample, or, when the cut fell between samples, a
placeholder sample standing for the lost rest (how many samples that held cannot be known). A shard that cannot be
opened is named and left out, unless more than `data.max_bad_fraction` of the shards are unusable.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import tarfile
import tempfile
import threading
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from vlp_jax import paths as path_lib
from vlp_jax.data.storage import records, shards
from vlp_jax.errors import ConfigError, DataError, DataNotFoundError

DEFAULT_IMAGE_KEYS = ('jpg', 'png', 'jpeg', 'webp')
DEFAULT_CAPTION_KEY = 'txt'
_BRACES = re.compile(r'\{([^{}]*)\}')
_COMPRESSED_MAGIC = {b'\x1f\x8b': 'gzip', b'BZh': 'bzip2', b'\xfd7zXZ': 'xz', b'\x28\xb5\x2f\xfd': 'zstd'}
_INDEX_VERSION = 2  # 2: truncations found at any point of a tar, and the placeholder sample for a lost rest
_BLOCK = 512  # tar's header and padding unit
# Bytes besides a sample's image and caption that one ranged read of a remote shard may fetch to get both at once
# (their tar headers and padding, a JSON member between them).
_REMOTE_SPAN_SLACK = 64 << 10


class TarMember(NamedTuple):
  """Where one member's bytes are in an uncompressed tar file."""
  path: str
  name: str
  offset: int
  size: int


def split_member_name(name: str) -> tuple[str, str]:
  """webdataset's grouping: 'dir/000012.seg.png' -> ('dir/000012', 'seg.png'), extension lower-cased."""
  folder, base = os.path.split(name)
  stem, _, extension = base.partition('.')
  return (f'{folder}/{stem}' if folder else stem), extension.lower()


class TarListing(NamedTuple):
  """The samples of one tar in order of first appearance, {key: {extension: member}} (the first member of each
  extension); `truncation`: '' for a whole tar, else where and how it breaks off (the samples before are kept);
  `size`: the file's size in bytes."""
  samples: dict[str, dict[str, TarMember]]
  truncation: str
  size: int


def tar_samples(path: str) -> TarListing:
  """The samples of one uncompressed tar (TarListing). tarfile stops without an error where a tar is cut inside a
  header or between members, so the end it stopped at is checked too: a whole tar has a zero block there."""
  samples: dict[str, dict[str, TarMember]] = {}
  size = path_lib.size(path)
  try:
    # a remote tar is scanned through a seekable file object: only the ranges holding headers are fetched
    with path_lib.open_binary(path) as file, tarfile.open(fileobj=file, mode='r:') as tar:
      for info in tar:
        key, extension = split_member_name(info.name)
        if not info.isfile() or not extension or not key or os.path.basename(key).startswith('.'):
          continue
        samples.setdefault(key, {}).setdefault(extension, TarMember(path, info.name, info.offset_data, info.size))
      end = tar.offset  # where the header that ended the listing starts
  except (tarfile.TarError, OSError, EOFError) as error:
    return TarListing(samples, f'it breaks off at byte {size} ({error})', size)
  return TarListing(samples, _truncation_at(path, end, size), size)


def _truncation_at(path: str, end: int, size: int) -> str:
  """'' when the block at `end` is tar's end-of-archive (zeros), else what is there instead."""
  with path_lib.open_binary(path) as f:
    f.seek(end)
    block = f.read(_BLOCK)
  if len(block) == _BLOCK and not block.strip(b'\0'):
    return ''
  if not block:
    return f'it ends at byte {size}, between two members, without the end-of-archive block'
  if len(block) < _BLOCK:
    return f'it ends at byte {size}, inside a tar header'
  return f'the tar header at byte {end} of {size} is unreadable'


def cut_sample(members: list[TarMember | None], size: int) -> bool:
  """Whether a sample of a truncated tar lacks one of its members (None) or one runs past the file's `size`: then it
  is the sample the cut went through; otherwise the cut fell between samples."""
  return any(m is None or m.offset + m.size > size for m in members)


def compression_of(path: str) -> str | None:
  """'gzip', 'bzip2', 'xz' or 'zstd' for a compressed file (its members cannot be read by offset), else None."""
  with path_lib.open_binary(path) as f:
    head = f.read(6)
  return next((name for magic, name in _COMPRESSED_MAGIC.items() if head.startswith(magic)), None)


def read_member(handle: BinaryIO, member: TarMember) -> bytes:
  """A member's bytes; records.BadRecordError('corrupt_tar') when the file ends before them."""
  handle.seek(member.offset)
  data = handle.read(member.size)
  if len(data) != member.size:
    raise records.BadRecordError('corrupt_tar', f'{member.name} in {member.path} is cut short')
  return data


# ---------------------------------------------------------------------------------------------------------------
# Shard patterns


def expand_braces(pattern: str) -> list[str]:
  """webdataset's brace notation: '{00000..00002}' (zero-padded ranges) and '{a,b}' (alternatives), expanded
  left to right: 'd/{0..1}.tar' -> ['d/0.tar', 'd/1.tar']."""
  match = _BRACES.search(pattern)
  if not match:
    return [pattern]
  body, head, tail = match.group(1), pattern[:match.start()], pattern[match.end():]
  if (bounds := re.fullmatch(r'(\d+)\.\.(\d+)', body)):
    first, last = bounds.groups()
    width = len(first) if first.startswith('0') else 0
    options = [str(i).zfill(width) for i in range(int(first), int(last) + 1)]
  else:
    options = body.split(',')
  return [expanded for option in options for expanded in expand_braces(head + option + tail)]


def shard_paths(pattern: str) -> list[str]:
  """The tar files of one `data.path` entry: a brace pattern, a glob, a single file or a directory (its *.tar),
  each expanded name globbed in turn; sorted within each expanded name, in order across them. Local or on an
  object store ('gs://bucket/laion/{00000..41455}.tar', 'gs://bucket/laion/*.tar', 'gs://bucket/laion/')."""
  found = []
  for name in expand_braces(pattern):
    if path_lib.isdir(name):
      found.extend(path_lib.glob(path_lib.join(name, '*.tar')))
    elif path_lib.has_glob(name):
      found.extend(path_lib.glob(name))
    else:
      found.append(name)
  return found


def parse_sources(path_setting: str) -> list[tuple[str, str]]:
  """`data.path` for webdataset data -> [(source name, pattern)]: comma-separated entries, each 'NAME=PATTERN' or a
  PATTERN named after its folder ('/data/cc12m/{0..9}.tar' and '/data/cc12m/' -> 'cc12m'). Raises ConfigError when
  an unnamed entry's name is also another folder's or an explicit one (they would be mixed and counted as one
  source); entries named alike on purpose, or patterns of one folder, make one source."""
  out = []
  origins: dict[str, dict[str | None, str]] = {}  # name -> {its folder (None: named explicitly): the first entry}
  for item in (i.strip() for i in _split_top_level_commas(path_setting)):
    if not item:
      continue
    name, pattern = _explicit_name(item)
    folder = None if name else source_folder(pattern)
    name = name or os.path.basename(folder) or 'webdataset'
    origins.setdefault(name, {}).setdefault(folder, item)
    out.append((name, pattern))
  for name, entries in origins.items():
    if len(entries) > 1:
      raise _name_clash_error(name, list(entries.values()))
  return out


def _explicit_name(item: str) -> tuple[str, str]:
  """'cc3m=/data/x' -> ('cc3m', '/data/x'); an entry without a name (an '=' in a path is no name) -> ('', item)."""
  name, sep, pattern = item.partition('=')
  return (name.strip(), pattern.strip()) if sep and '/' not in name else ('', item)


def source_folder(pattern: str) -> str:
  """The folder an unnamed `data.path` entry is named after: the entry itself when it is a folder, else the folder
  of its tar files ('/data/cc3m/' and '/data/cc3m/{0..9}.tar' -> '/data/cc3m'), as an absolute path (a remote
  one as it is: 'gs://bucket/cc3m/{0..9}.tar' -> 'gs://bucket/cc3m')."""
  path = path_lib.absolute(pattern.rstrip('/') or '/')
  last = path_lib.basename(path)
  names_tars = last.lower().endswith('.tar') or any(c in last for c in '*?[{')
  return path_lib.parent(path) if names_tars else path


def _name_clash_error(name: str, entries: list[str]) -> ConfigError:
  listed = ', '.join(f"'{e}'" for e in entries)
  renamed = ','.join(f'{name}{k}={_explicit_name(e)[1]}' for k, e in enumerate(entries, 1))
  return ConfigError(
      f"config.data.path entries {listed} would all be the source '{name}' (an entry without a name is named after "
      "its folder), and their examples mixed and counted as one source. Name each one as NAME=PATTERN, e.g. "
      f"--config.data.path='{renamed}' (the same NAME on several entries makes them one source on purpose).")


def _split_top_level_commas(text: str) -> list[str]:
  """Split at commas outside braces ('{a,b}' stays whole)."""
  parts, depth, current = [], 0, []
  for char in text:
    depth += {'{': 1, '}': -1}.get(char, 0)
    if char == ',' and depth == 0:
      parts.append(''.join(current))
      current = []
    else:
      current.append(char)
  return parts + [''.join(current)]


# ---------------------------------------------------------------------------------------------------------------
# The index


@dataclasses.dataclass(frozen=True)
class Fields:
  """Which members make a sample: the first present of `image_keys`, and the caption: a member's text
  ('txt') or a field of the sample's JSON member ('json:caption')."""
  image_keys: tuple[str, ...] = DEFAULT_IMAGE_KEYS
  caption_key: str = DEFAULT_CAPTION_KEY

  @property
  def caption_member(self) -> str:
    return self.caption_key.partition(':')[0]

  @property
  def caption_json_field(self) -> str:
    return self.caption_key.partition(':')[2]


# One row per sample: its image and caption members' (offset, size); -1 where the member is missing. A JSON caption
# is read from the JSON member.
_INDEX_DTYPE = np.dtype([('image_offset', '<i8'), ('image_size', '<i8'), ('caption_offset', '<i8'),
                         ('caption_size', '<i8')])
INDEX_ROW_BYTES = _INDEX_DTYPE.itemsize  # per sample, besides its key (data/loading/host_memory.py)


class ShardIndex(NamedTuple):
  """One shard's index: rows [n] of _INDEX_DTYPE, keys [n] bytes, and its TarListing.truncation ('' when whole).
  A truncated shard's last row stands for its loss (read as 'corrupt_tar'): the sample the cut went through, or a
  placeholder row (no members, key b'') when the cut fell between samples."""
  rows: np.ndarray
  keys: np.ndarray
  truncation: str


def _index_shard(path: str, fields: Fields) -> ShardIndex:
  listing = tar_samples(path)
  chosen = [(next((members[k] for k in fields.image_keys if k in members), None), members.get(fields.caption_member))
            for members in listing.samples.values()]
  keys = list(listing.samples)
  if listing.truncation and not (chosen and cut_sample(list(chosen[-1]), listing.size)):
    chosen.append((None, None))
    keys.append('')
  rows = np.full(len(chosen), -1, _INDEX_DTYPE)
  for i, (image, caption) in enumerate(chosen):
    if image is not None:
      rows[i]['image_offset'], rows[i]['image_size'] = image.offset, image.size
    if caption is not None:
      rows[i]['caption_offset'], rows[i]['caption_size'] = caption.offset, caption.size
  return ShardIndex(rows, np.asarray([k.encode('utf-8', 'surrogateescape') for k in keys], dtype=bytes),
                    listing.truncation)


def _cache_file(cache_dir: str, path: str, fields: Fields) -> str:
  """Where the index of shard `path` is cached: a local file under `cache_dir`, named after the shard's path and
  version (a remote shard's too: the cache never lives on the object store)."""
  if path_lib.is_remote(path):
    identity = [path, path_lib.version(path)]
  else:
    stat = os.stat(path)
    identity = [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]
  digest = hashlib.sha1(json.dumps([_INDEX_VERSION, *identity, list(fields.image_keys),
                                    fields.caption_member]).encode()).hexdigest()
  return os.path.join(cache_dir, 'webdataset_index', digest[:2], digest + '.npz')


# numpy parses each .npy header with ast.literal_eval, and CPython 3.11's ast module keeps its recursion depth in
# state shared by threads (python/cpython#106905): `index_shards` threads reading cached indexes at once made a
# training process fail with "SystemError: AST constructor recursion depth mismatch". The reads are small; one at a
# time costs nothing next to indexing a shard, which stays parallel.
CACHED_INDEX_READ = threading.Lock()


def load_index(path: str, fields: Fields, cache_dir: str = '') -> ShardIndex:
  """One shard's index, from the cache when the shard is unchanged (same path, size and mtime); raises OSError when
  the shard cannot be opened."""
  if (compression := compression_of(path)):  # once: on an object store each call is a request
    raise OSError(f'{path} is a {compression}-compressed tar; samples are read by offset from plain .tar '
                  'files, as img2dataset writes them: decompress it first')
  cached = _cache_file(cache_dir, path, fields) if cache_dir and not path_lib.is_remote(cache_dir) else ''
  if cached and os.path.exists(cached):
    with CACHED_INDEX_READ, np.load(cached) as data:
      return ShardIndex(data['rows'], data['keys'], str(data['truncation']))
  index = _index_shard(path, fields)
  if cached:
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    temporary = f'{cached}.{os.getpid()}.tmp.npz'
    np.savez(temporary, **index._asdict())
    os.replace(temporary, cached)
  return index


@dataclasses.dataclass(frozen=True)
class ShardIndexes:
  """Every shard's index (`load_index`), built once for a run: {path: ShardIndex} of the readable shards, and
  [(path, error)] of those that cannot be opened."""
  by_path: dict[str, ShardIndex]
  unreadable: list[tuple[str, str]]


def index_shards(paths: list[str], fields: Fields = Fields(), cache_dir: str = '', num_threads: int = 16
                 ) -> ShardIndexes:
  """The indexes of `paths`, read with `num_threads` threads (remote file systems); a shard that cannot be opened is
  named on stdout and listed in `unreadable`, a truncated one named on stdout with where it breaks off."""
  def index(path):
    try:
      return load_index(path, fields, cache_dir)
    except OSError as error:
      return error

  with concurrent.futures.ThreadPoolExecutor(max(1, min(num_threads, len(paths)))) as pool:
    indexes = dict(zip(paths, pool.map(index, paths)))
  unreadable = [(p, str(e)) for p, e in indexes.items() if isinstance(e, OSError)]
  for path, error in unreadable:
    print(f'warning: webdataset shard {path} cannot be read and is left out: {error}', flush=True)
  readable = {p: i for p, i in indexes.items() if not isinstance(i, OSError)}
  for path, index in readable.items():
    if index.truncation:
      print(f'warning: webdataset shard {path} is truncated: {index.truncation}. Its {len(index.rows) - 1} samples '
            "before the cut are used; what it lost counts as one 'corrupt_tar' (train/data/skipped/corrupt_tar).",
            flush=True)
  return ShardIndexes(readable, unreadable)


def shared_index_directory(cache_dir: str) -> str:
  """Where the memory-mapped index of a run's shards is written: under `cache_dir`, or the system's temporary
  folder when `cache_dir` is unset or remote (a memory map needs a local file)."""
  if cache_dir and not path_lib.is_remote(cache_dir):
    return os.path.join(cache_dir, 'webdataset_index', 'shared')
  return os.path.join(tempfile.gettempdir(), 'vlp_jax_webdataset_index')


def save_shared_array(array: np.ndarray, directory: str) -> str:
  """Write `array` once to `directory`/<its content digest>.npy (atomically; an existing file is reused) and return
  the path: every process and worker of a host then maps the same file."""
  digest = hashlib.sha1(f'{array.dtype.str}{array.shape}'.encode())
  digest.update(memoryview(np.ascontiguousarray(array)).cast('B'))
  path = os.path.join(directory, f'{digest.hexdigest()}.npy')
  if not os.path.exists(path):
    os.makedirs(directory, exist_ok=True)
    temporary = f'{path}.{os.getpid()}.{threading.get_ident()}.tmp'
    with open(temporary, 'wb') as f:
      np.save(f, array)
    os.replace(temporary, path)
  return path


def map_shared_array(path: str) -> np.ndarray:
  """The array saved at `path`, memory-mapped read-only: its pages are the host's page cache, shared by every
  process that maps it, not a copy per process."""
  return np.load(path, mmap_mode='r')


class TarShardRecords:
  """Random access to the samples of webdataset shards: index -> (shard id, example) where the example is
  {'image': bytes, 'caption': str, 'key': str, 'source': str, 'label': -1}, or {'bad': reason, 'detail': text,
  'key': ...} for a sample the pipeline must replace (pipeline.LoadExamples raises it as records.BadRecordError).

  paths: the shards; shard_ids[k]: the id reported for paths[k]; sources: {path: its source name}; indexes: the
  shards' indexes when already built (`index_shards` over these paths or more), else they are built here. Shards
  that cannot be opened are left out (`unreadable` lists them).

  The samples' index (about 40 bytes a sample: gigabytes for a web-scale set) is written once to a file under
  `cache_dir` (shared_index_directory) and memory-mapped, so that pickling this object into grain's worker
  processes sends the file's path, not the index: every worker of a host reads the same pages. At most
  `shards.open_shards_budget()` tar files are open at once per process (shards.OpenHandles).
  """

  def __init__(self, paths: list[str], shard_ids: list[int] | None = None, sources: dict[str, str] | None = None,
               fields: Fields = Fields(), cache_dir: str = '', indexes: ShardIndexes | None = None):
    self._paths = list(paths)
    self._shard_ids = list(range(len(paths)) if shard_ids is None else shard_ids)
    self._sources = [(sources or {}).get(path, '') for path in self._paths]
    self._fields = fields
    indexes = indexes or index_shards(self._paths, fields, cache_dir)
    wanted = set(self._paths)
    self.unreadable = [(p, e) for p, e in indexes.unreadable if p in wanted]
    kept = [k for k, path in enumerate(self._paths) if path in indexes.by_path]
    shard_indexes = [indexes.by_path[self._paths[k]] for k in kept]
    self._kept = np.asarray(kept, np.int64)
    rows = np.concatenate([i.rows for i in shard_indexes]) if kept else np.zeros(0, _INDEX_DTYPE)
    keys = np.concatenate([i.keys for i in shard_indexes]) if kept else np.zeros(0, bytes)
    self._ends = np.cumsum([len(i.rows) for i in shard_indexes]).astype(np.int64)
    # A truncated tar's last row stands for its loss (ShardIndex): corrupt_tar, not a missing member.
    self._loss_rows = {int(end) - 1: i.truncation for i, end in zip(shard_indexes, self._ends) if i.truncation}
    # empty arrays cannot be mapped (and cost nothing to copy)
    directory = shared_index_directory(cache_dir)
    self._index_files = (save_shared_array(rows, directory), save_shared_array(keys, directory)) if len(rows) else ()
    self._map_index(rows, keys)
    self._files = self._new_files()

  def _map_index(self, rows: np.ndarray | None = None, keys: np.ndarray | None = None) -> None:
    if self._index_files:
      rows, keys = (map_shared_array(path) for path in self._index_files)
    self._rows, self._keys = rows, keys

  def _new_files(self) -> shards.OpenHandles:
    return shards.OpenHandles(lambda shard: os.open(self._paths[shard], os.O_RDONLY), os.close)

  def __getstate__(self):
    """The index travels as its files' paths (a worker maps them), and open files are not carried."""
    dropped = ('_files', '_rows', '_keys') if self._index_files else ('_files',)
    return {k: v for k, v in self.__dict__.items() if k not in dropped}

  def __setstate__(self, state):
    self.__dict__.update(state)
    if self._index_files:
      self._map_index()
    self._files = self._new_files()

  def __del__(self):
    if hasattr(self, '_files'):
      self._files.close_all()

  def __len__(self) -> int:
    return len(self._rows)

  def shard_ranges(self) -> list[tuple[int, int]]:
    """[(start, end)] of each readable shard's samples."""
    starts = np.concatenate([[0], self._ends[:-1]]).astype(np.int64)
    return list(zip(starts.tolist(), self._ends.tolist()))

  def _read_at(self, shard: int, offset: int, size: int) -> bytes:
    """`size` bytes at `offset` of a shard. pread keeps no file position, so grain's reader threads can read one
    shard at once (a shared seek-then-read would hand one thread's bytes to another). A remote shard is read by one
    ranged request, which holds no open file."""
    path = self._paths[shard]
    if path_lib.is_remote(path):
      data = path_lib.read_range(path, offset, size)
    else:
      with self._files.use(shard) as descriptor:
        data = os.pread(descriptor, int(size), int(offset))
    if len(data) != size:
      raise records.BadRecordError('corrupt_tar', 'the sample is cut short: the tar ends inside it')
    return data

  def __getitem__(self, index: int) -> tuple[int, dict[str, Any]]:
    index = int(index)
    shard = int(self._kept[np.searchsorted(self._ends, index, side='right')])
    row, key = self._rows[index], self._keys[index].decode('utf-8', 'replace')
    example = {'key': key, 'source': self._sources[shard]}
    try:
      if index in self._loss_rows and (row['image_offset'] < 0 or row['caption_offset'] < 0):
        raise records.BadRecordError('corrupt_tar', f'the tar is truncated ({self._loss_rows[index]}): '
                                     + ('what followed its last whole sample is lost' if key == '' else
                                        'this sample is cut'))
      example.update(self._read(shard, row))
    except records.BadRecordError as bad:
      example.update(bad=bad.reason, detail=bad.message)
    return self._shard_ids[shard], example

  def __getitems__(self, indices) -> list[tuple[int, dict[str, Any]]]:
    return [self[i] for i in indices]

  def _member_reader(self, shard: int, row: np.void):
    """read(offset, size) -> bytes for the image and caption members of one sample (row). On an object store, where
    a request's latency outweighs a small member's transfer, both come from one ranged request spanning them when
    they lie close together (img2dataset writes a sample's members one after another); else one read each."""
    read = lambda offset, size: self._read_at(shard, offset, size)  # noqa: E731
    if not path_lib.is_remote(self._paths[shard]):
      return read
    starts = (int(row['image_offset']), int(row['caption_offset']))
    ends = (starts[0] + int(row['image_size']), starts[1] + int(row['caption_size']))
    start, end = min(starts), max(ends)
    if end - start > int(row['image_size']) + int(row['caption_size']) + _REMOTE_SPAN_SLACK:
      return read
    span = read(start, end - start)  # corrupt_tar when the tar ends inside it, as a member's own read would be
    return lambda offset, size: span[offset - start:offset - start + size]

  def _read(self, shard: int, row: np.void) -> dict[str, Any]:
    if row['image_offset'] < 0:
      raise records.BadRecordError('missing_image', f'the sample has no {"/".join(self._fields.image_keys)} member')
    if row['caption_offset'] < 0:
      raise records.BadRecordError('missing_caption', f'the sample has no {self._fields.caption_member} member')
    read = self._member_reader(shard, row)
    caption = read(row['caption_offset'], row['caption_size']).decode('utf-8', 'replace')
    if self._fields.caption_json_field:
      try:
        caption = json.loads(caption).get(self._fields.caption_json_field) or ''
      except (ValueError, AttributeError):
        raise records.BadRecordError('empty_caption', 'the sample has no readable JSON caption') from None
    return {'image': read(row['image_offset'], row['image_size']), 'caption': str(caption).strip(), 'label': -1,
            'long_caption': ''}


def check_unreadable(paths: list[str], unreadable: list[tuple[str, str]], max_bad_fraction: float) -> None:
  """DataError when more than `max_bad_fraction` of the shards cannot be opened (a wrong path, a bad mount), or all
  of them; `unreadable`: TarShardRecords.unreadable."""
  if unreadable and (len(unreadable) == len(paths) or len(unreadable) > max_bad_fraction * len(paths)):
    listed = '\n'.join(f'  {p}: {e}' for p, e in unreadable[:10])
    raise DataError(f'{len(unreadable)} of {len(paths)} webdataset shards cannot be read (more than '
                    f'data.max_bad_fraction={max_bad_fraction}):\n{listed}')


def missing_pattern_error(pattern: str) -> DataNotFoundError:
  return DataNotFoundError(f"config.data.path entry '{pattern}' matches no tar shard (brace patterns like "
                           "'/data/laion/{00000..41455}.tar', globs, a .tar file or a folder of them)")
