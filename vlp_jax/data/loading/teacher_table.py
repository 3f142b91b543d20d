"""Pre-extracted teacher embeddings, looked up by example key (SaCo's pseudo-affinity mimic targets).

The table is the .npz that `python -m vlp_jax.embed --dataset=... --split=train` writes: `keys` and
`image_embeddings` (the paper finds mimicking the image modality best); 2.8M CC3M examples at 512 dims take 5.7 GB in
float32. It is never read into memory: `prepare_table` writes, once per table and host, a key index (the keys sorted,
and their rows) beside a description of where the embeddings lie, and every process and grain worker memory-maps
them, so that the host's page cache holds one copy whatever the number of workers. The embeddings are mapped in
place from the .npz where it stores them uncompressed as float32 (np.savez, as `vlp_jax.embed` writes), else
converted once into the shared folder. A table on an object store (`gs://...`) is first copied, once per host and
version of the object, into the local cache folder: a memory map needs a local file.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import zipfile

import numpy as np

from vlp_jax import paths

MANIFEST = 'table.json'
_ZIP_LOCAL_HEADER = 30  # bytes of a zip local file header before its name and extra field


def local_cache_dir(cache_dir: str) -> str:
  """Where a host keeps its shared files: `cache_dir`, or the system's temporary folder when it is unset or on an
  object store (memory maps need local files)."""
  return cache_dir if cache_dir and not paths.is_remote(cache_dir) else tempfile.gettempdir()


def local_table(path: str, cache_dir: str = '') -> str:
  """The table at `path` as a local file: `path` itself when local; a remote one copied into
  `local_cache_dir(cache_dir)`/teacher_tables/copies/, named after its URL and version, unless copied already."""
  if not paths.is_remote(path):
    return path
  digest = hashlib.sha1(json.dumps([path, paths.version(path)]).encode()).hexdigest()
  copy = os.path.join(local_cache_dir(cache_dir), 'teacher_tables', 'copies', f'{digest}.npz')
  if not os.path.exists(copy):
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    print(f'Copying the teacher embeddings {path} to {copy} (once per host) ...', flush=True)
    paths.copy_to_local(path, copy)
  return copy


def _table_directory(path: str, cache_dir: str) -> str:
  """Where the shared files of the table at `path` go: named after its path, size and modification time."""
  stat = os.stat(path)
  digest = hashlib.sha1(json.dumps([os.path.abspath(path), stat.st_size, stat.st_mtime_ns]).encode()).hexdigest()
  return os.path.join(local_cache_dir(cache_dir), 'teacher_tables', digest)


def stored_array_location(npz_path: str, name: str) -> dict | None:
  """{'offset', 'shape', 'dtype', 'fortran_order'} of array `name` in an .npz when its bytes lie in the file as they
  are (an uncompressed member), so that np.memmap can map it; None when compressed."""
  with zipfile.ZipFile(npz_path) as archive:
    info = archive.getinfo(f'{name}.npy')
  if info.compress_type != zipfile.ZIP_STORED:
    return None
  with open(npz_path, 'rb') as f:
    f.seek(info.header_offset)
    header = f.read(_ZIP_LOCAL_HEADER)
    name_length, extra_length = int.from_bytes(header[26:28], 'little'), int.from_bytes(header[28:30], 'little')
    f.seek(info.header_offset + _ZIP_LOCAL_HEADER + name_length + extra_length)
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read_header(f)
    return {'offset': f.tell(), 'shape': list(shape), 'dtype': dtype.str, 'fortran_order': bool(fortran_order)}


def prepare_table(path: str, cache_dir: str = '') -> str:
  """Write the shared files of the teacher table at `path` (an .npz of `keys` and `image_embeddings`) under
  `cache_dir` (the system's temporary folder when empty), unless they are there already; returns their directory,
  which `load_table` maps. `path` may be on an object store (copied to the local cache first: `local_table`).
  Raises ValueError when the file lacks either array."""
  path = local_table(path, cache_dir)
  directory = _table_directory(path, cache_dir)
  if os.path.exists(os.path.join(directory, MANIFEST)):
    return directory
  with np.load(path, allow_pickle=False) as data:
    if 'keys' not in data or 'image_embeddings' not in data:
      raise ValueError(f'{path} lacks `keys` / `image_embeddings`; write it with `python -m vlp_jax.embed '
                       '--checkpoint=TEACHER --dataset=NAME --split=train --output=FILE.npz`')
    keys = np.char.encode(np.asarray(data['keys']).astype(str), 'utf-8')
    temporary = f'{directory}.{os.getpid()}.tmp'
    os.makedirs(temporary, exist_ok=True)
    order = np.argsort(keys, kind='stable')  # stable: a repeated key's rows stay in file order
    np.save(os.path.join(temporary, 'keys.npy'), keys[order])
    np.save(os.path.join(temporary, 'rows.npy'), order.astype(np.int64))
    location = stored_array_location(path, 'image_embeddings')
    if location is None or location['dtype'] != np.dtype(np.float32).str or location['fortran_order']:
      np.save(os.path.join(temporary, 'embeddings.npy'), np.asarray(data['image_embeddings'], np.float32))
      location = {'file': 'embeddings.npy'}
    else:
      location['file'] = os.path.abspath(path)
  with open(os.path.join(temporary, MANIFEST), 'w') as f:
    json.dump({'source': os.path.abspath(path), 'embeddings': location}, f)
  try:
    os.rename(temporary, directory)
  except OSError:  # another process prepared it first: theirs is the same
    shutil.rmtree(temporary, ignore_errors=True)
  return directory


class TeacherTable:
  """The memory-mapped table in a `prepare_table` directory: table[key] -> [d] float32."""

  def __init__(self, directory: str):
    with open(os.path.join(directory, MANIFEST)) as f:
      manifest = json.load(f)
    self.path = manifest['source']
    self.keys = np.load(os.path.join(directory, 'keys.npy'), mmap_mode='r')  # [n] bytes, sorted
    self.rows = np.load(os.path.join(directory, 'rows.npy'), mmap_mode='r')  # [n] int64: the row of keys[i]
    where = manifest['embeddings']
    if where['file'] == 'embeddings.npy':
      self.embeddings = np.load(os.path.join(directory, where['file']), mmap_mode='r')
    else:  # in place in the .npz
      self.embeddings = np.memmap(where['file'], np.dtype(where['dtype']), 'r', where['offset'],
                                  tuple(where['shape']))

  def __len__(self) -> int:
    return len(self.keys)

  def __getitem__(self, key: str) -> np.ndarray:
    """[d] float32 embedding of the example `key` (a copy: the mapped file stays read-only)."""
    encoded = key.encode('utf-8')
    position = int(np.searchsorted(self.keys, encoded, side='right')) - 1  # a repeated key: its last row
    if position < 0 or self.keys[position] != encoded:
      raise KeyError(f"example '{key}' has no embedding in {self.path}: it was written for another dataset or split")
    return np.array(self.embeddings[self.rows[position]], np.float32)


def table_bytes(directory: str) -> int:
  """Bytes of the mapped files of a `prepare_table` directory (keys, rows, embeddings); 0 for '' (no table)."""
  if not directory:
    return 0
  table = TeacherTable(directory)
  return table.keys.nbytes + table.rows.nbytes + table.embeddings.nbytes


@functools.lru_cache(maxsize=4)
def load_table(path: str) -> TeacherTable:
  """The table at `path`: a `prepare_table` directory, or an .npz (prepared here, under the temporary folder).
  One mapping per process: grain workers each map the same files, which the host's page cache holds once."""
  return TeacherTable(path if os.path.isdir(path) else prepare_table(path))
