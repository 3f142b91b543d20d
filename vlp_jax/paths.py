"""Paths that are either local or on an object store (`gs://bucket/...`, `s3://bucket/...`): the few operations a run
needs, each taking and returning strings.

A path with `://` never goes through `os.path` or `open` (they would turn `gs://bucket/run` into the local folder
`$PWD/gs:/bucket/run`); it goes through `etils.epath`, which reaches Google Cloud Storage with gcsfs and S3 with s3fs
(install them: `pip install gcsfs` / `pip install s3fs`). Local paths keep the behaviour of `os` exactly.

Object stores have no folders and cannot append to an object: `makedirs` does nothing there, and `AppendableFile`
keeps what it wrote in memory and rewrites the whole object when flushed (a single upload, so readers see either the
old or the new object).
"""
from __future__ import annotations

import os
import glob as local_glob
import shutil

import fsspec
from etils import epath


def is_remote(path: str | os.PathLike) -> bool:
  """Whether `path` names an object store (`gs://`, `s3://`, ...), not a local file."""
  return '://' in os.fspath(path)


# Where orbax-checkpoint can write and read arrays: local (or mounted) paths and Google Cloud Storage, through
# tensorstore's gcs driver. Other schemes (s3://) reach tensorstore as relative local paths, which orbax refuses.
CHECKPOINT_SCHEMES = ('gs',)


def scheme(path: str) -> str | None:
  """'gs' for 'gs://bucket/x', None for a local path."""
  return os.fspath(path).split('://', 1)[0] if is_remote(path) else None


def checkpoint_location_problem(path: str) -> str | None:
  """Why checkpoints cannot live at `path` (an object store orbax cannot write arrays to), or None."""
  if not is_remote(path) or scheme(path) in CHECKPOINT_SCHEMES:
    return None
  return (f'{scheme(path)}:// cannot hold checkpoints: orbax-checkpoint writes their arrays to local paths and '
          f'{", ".join(s + "://" for s in CHECKPOINT_SCHEMES)} only. Mount the bucket (e.g. mountpoint-s3 or '
          's3fs-fuse) and pass the mount\'s local path')


def absolute(path: str) -> str:
  """A local path made absolute (as `os.path.abspath`); a remote one unchanged."""
  return path if is_remote(path) else os.path.abspath(path)


def join(base: str, *names: str) -> str:
  """`base/name/...`: `os.path.join` for local paths, '/' separators for remote ones."""
  if not is_remote(base):
    return os.path.join(base, *names)
  return '/'.join([base.rstrip('/'), *(name.strip('/') for name in names)])


def basename(path: str) -> str:
  """The last component, ignoring a trailing separator: 'gs://b/run/' -> 'run'."""
  if not is_remote(path):
    return os.path.basename(os.path.normpath(path))
  return path.rstrip('/').rsplit('/', 1)[-1]


def parent(path: str) -> str:
  """The path without its last component, ignoring a trailing separator: 'gs://b/run/7/' -> 'gs://b/run'."""
  if not is_remote(path):
    return os.path.dirname(os.path.normpath(path))
  return path.rstrip('/').rsplit('/', 1)[0]


def exists(path: str) -> bool:
  return os.path.exists(path) if not is_remote(path) else epath.Path(path).exists()


def isdir(path: str) -> bool:
  """Whether `path` is a directory; on an object store, whether objects lie under the prefix `path/`."""
  return os.path.isdir(path) if not is_remote(path) else epath.Path(path).is_dir()


def listdir(path: str) -> list[str]:
  """The names (not paths) of the entries of directory `path`."""
  if not is_remote(path):
    return os.listdir(path)
  return [child.name for child in epath.Path(path).iterdir()]


def makedirs(path: str) -> None:
  """`os.makedirs(path, exist_ok=True)` for a local path. Nothing on an object store: it has no folders, and asking
  gcsfs for them could create a missing bucket rather than report it."""
  if not is_remote(path):
    os.makedirs(path, exist_ok=True)


def read_bytes(path: str) -> bytes:
  if not is_remote(path):
    with open(path, 'rb') as f:
      return f.read()
  return epath.Path(path).read_bytes()


def read_text(path: str) -> str:
  return read_bytes(path).decode('utf-8')


def write_bytes(path: str, data: bytes) -> None:
  """Write `path` whole or not at all: locally through a synced temporary file renamed into place; on an object
  store as one upload (objects appear only once complete)."""
  if is_remote(path):
    epath.Path(path).write_bytes(data)
    return
  tmp = f'{path}.tmp'
  with open(tmp, 'wb') as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
  write_bytes(path, text.encode('utf-8'))


def remove(path: str) -> None:
  """Delete the file `path`."""
  if not is_remote(path):
    os.remove(path)
  else:
    epath.Path(path).unlink()


def rename(source: str, target: str) -> None:
  """Move a file or directory: `os.replace` locally; on an object store a copy and delete of each object."""
  if not is_remote(source) and not is_remote(target):
    os.replace(source, target)
  else:
    epath.Path(source).rename(target)


class AppendableFile:
  """A file that only grows (metrics, event files). Locally, an open file in append mode, flushed at every write as
  before. On an object store, which cannot append, the bytes are kept in memory and the whole object is rewritten
  by `flush` (and `close`), so a caller flushes once per batch of writes, not per write.

  `initial`: bytes the file starts with on an object store (what was kept of it on resume); locally the file on
  disk is appended to.
  """

  def __init__(self, path: str, initial: bytes = b''):
    self.path = path
    self.remote = is_remote(path)
    self._buffer = bytearray(initial)
    self._dirty = self.remote  # an object store: the first flush creates the object
    self._file = None if self.remote else open(path, 'ab')

  @property
  def size(self) -> int:
    """Bytes written so far on an object store (0 locally: nothing is held)."""
    return len(self._buffer)

  def write(self, data: bytes) -> None:
    if self._file is not None:
      self._file.write(data)
      self._file.flush()
    else:
      self._buffer += data
      self._dirty = True

  def flush(self) -> None:
    if self.remote and self._dirty:
      epath.Path(self.path).write_bytes(bytes(self._buffer))
      self._dirty = False

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None
    else:
      self.flush()


# ---------------------------------------------------------------------------------------------------------------
# Reading data files (training shards, teacher tables) where they lie. Remote files go through fsspec, the layer
# under etils.epath: its range reads need no open handle, and its file objects seek.

_GLOB_CHARACTERS = '*?['


def _filesystem(path: str):
  """(fsspec filesystem, the path as that filesystem names it) of a remote path."""
  return fsspec.core.url_to_fs(path)


def glob(pattern: str) -> list[str]:
  """The files matching `pattern` ('*', '?', '[...]' in any component), sorted; remote ones as full URLs."""
  if not is_remote(pattern):
    return sorted(local_glob.glob(pattern))
  filesystem, _ = _filesystem(pattern)
  prefix = f'{scheme(pattern)}://'
  # fsspec names matches without the scheme (some filesystems with a leading '/'): put it back
  return sorted(prefix + match.lstrip('/') for match in filesystem.glob(pattern))


def has_glob(pattern: str) -> bool:
  return any(c in pattern for c in _GLOB_CHARACTERS)


def size(path: str) -> int:
  """Bytes in the file `path`."""
  if not is_remote(path):
    return os.path.getsize(path)
  filesystem, name = _filesystem(path)
  return int(filesystem.size(name))


def version(path: str) -> str:
  """A string that changes whenever the file `path` is rewritten: its size and modification time locally; on an
  object store its size and what the store reports of its version (generation, etag, time of upload)."""
  if not is_remote(path):
    stat = os.stat(path)
    return f'{stat.st_size}:{stat.st_mtime_ns}'
  filesystem, name = _filesystem(path)
  info = filesystem.info(name)
  stamps = [str(info.get(k)) for k in ('generation', 'etag', 'ETag', 'updated', 'mtime', 'created') if k in info]
  return ':'.join([str(info.get('size'))] + stamps)


def open_binary(path: str):
  """The file `path` opened for reading bytes, seekable (a remote file fetches the ranges it is asked for)."""
  if not is_remote(path):
    return open(path, 'rb')
  filesystem, name = _filesystem(path)
  return filesystem.open(name, 'rb')


def read_range(path: str, offset: int, length: int) -> bytes:
  """`length` bytes of remote file `path` from `offset` (fewer where the file ends first), one ranged request and
  no open handle: safe from any thread or worker process."""
  filesystem, name = _filesystem(path)
  return filesystem.cat_file(name, start=int(offset), end=int(offset) + int(length))


def copy_to_local(path: str, local_path: str) -> None:
  """Copy the file `path` (local or remote) to the local file `local_path`, which appears whole or not at all."""
  temporary = f'{local_path}.{os.getpid()}.tmp'
  with open_binary(path) as source, open(temporary, 'wb') as target:
    shutil.copyfileobj(source, target, 16 << 20)
  os.replace(temporary, local_path)


def upload(local_path: str, path: str) -> None:
  """Copy the local file `local_path` to `path` (remote: streamed as one upload; local: copied)."""
  if not is_remote(path):
    shutil.copyfile(local_path, path)
    return
  filesystem, name = _filesystem(path)
  filesystem.put_file(local_path, name)
