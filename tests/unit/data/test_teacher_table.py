"""Pre-extracted teacher embeddings (data/loading/teacher_table.py, issue 61 item 15): memory-mapped once per host, not
loaded into every grain worker, and looked up exactly as a dictionary of the .npz would."""
import os

import numpy as np
import pytest

from vlp_jax.data.loading import teacher_table as teacher


def _write_table(path, keys, compressed=False, dtype=np.float32):
  embeddings = np.random.default_rng(0).normal(size=(len(keys), 8)).astype(dtype)
  (np.savez_compressed if compressed else np.savez)(path, keys=np.array(keys), image_embeddings=embeddings,
                                                    text_embeddings=embeddings[:, :4])
  return embeddings


def _naive_lookup(path):
  """What the table held before: every row in memory, a dict from key to row (a repeated key: its last row)."""
  with np.load(path) as data:
    return {str(k): np.asarray(e, np.float32) for k, e in zip(data['keys'], data['image_embeddings'])}


@pytest.mark.parametrize('compressed', [False, True])
def test_lookups_match_a_dictionary_of_the_file(tmp_path, compressed):
  keys = ['k10', 'k2', 'ß-ünï', 'k1', 'k2', 'zz', '']  # unsorted, a repeat, non-ASCII, an empty key
  path = str(tmp_path / 'teacher.npz')
  _write_table(path, keys, compressed)
  directory = teacher.prepare_table(path, str(tmp_path / 'cache'))
  assert teacher.prepare_table(path, str(tmp_path / 'cache')) == directory  # prepared once
  table = teacher.TeacherTable(directory)
  reference = _naive_lookup(path)
  for key, expected in reference.items():
    got = table[key]
    assert got.dtype == np.float32 and got.shape == (8,)
    np.testing.assert_array_equal(got, expected)
  for missing in ('k3', 'a', 'zzz', 'k'):
    with pytest.raises(KeyError, match=f"'{missing}' has no embedding in {path}"):
      table[missing]


def test_embeddings_are_mapped_from_the_file_not_read_into_memory(tmp_path):
  path = str(tmp_path / 'teacher.npz')
  embeddings = _write_table(path, [f'k{i}' for i in range(50)])
  table = teacher.load_table(path)
  assert isinstance(table.embeddings, np.memmap) and os.path.samefile(table.embeddings.filename, path)
  np.testing.assert_array_equal(np.asarray(table.embeddings), embeddings)
  assert isinstance(table.keys, np.memmap) and isinstance(table.rows, np.memmap)
  # a float64 table cannot be mapped as float32: it is converted once, into the shared folder
  other = str(tmp_path / 'teacher64.npz')
  wide = _write_table(other, ['a', 'b'], dtype=np.float64)
  converted = teacher.TeacherTable(teacher.prepare_table(other, str(tmp_path / 'cache')))
  assert isinstance(converted.embeddings, np.memmap) and converted.embeddings.dtype == np.float32
  np.testing.assert_array_equal(converted['b'], wide[1].astype(np.float32))


def private_bytes() -> int:
  """This process's resident anonymous memory (RssAnon): what a copy costs. Pages of a mapped file are the host's
  page cache, shared by every process that maps it (RssFile), and the kernel can drop them."""
  with open('/proc/self/status') as f:
    line = next(line for line in f if line.startswith('RssAnon:'))
  return int(line.split()[1]) * 1024


@pytest.mark.skipif(not os.path.exists('/proc/self/status'), reason='reads resident memory from /proc')
def test_a_worker_holds_a_few_pages_of_the_table_not_the_table(tmp_path):
  """What each grain worker does: open the table the trainer prepared (LoadExamples carries its path) and look keys
  up. Its own memory grows by a few rows' copies, not by the table's 64 MB."""
  path = str(tmp_path / 'teacher.npz')
  num_rows, dims = 65536, 256
  np.savez(path, keys=np.array([f'key{i:06d}' for i in range(num_rows)]),
           image_embeddings=np.ones((num_rows, dims), np.float32))
  directory = teacher.prepare_table(path, str(tmp_path / 'cache'))
  before = private_bytes()
  table = teacher.load_table(directory)
  looked_up = [table[f'key{i:06d}'] for i in range(0, num_rows, num_rows // 16)]
  grown = private_bytes() - before
  assert all(np.all(row == 1) for row in looked_up)
  assert grown < num_rows * dims * 4 // 8, f'{grown} bytes resident for a {num_rows * dims * 4}-byte table'


def test_a_table_without_its_arrays_is_refused(tmp_path):
  path = str(tmp_path / 'wrong.npz')
  np.savez(path, embeddings=np.zeros((2, 4), np.float32))
  with pytest.raises(ValueError, match='lacks `keys` / `image_embeddings`'):
    teacher.prepare_table(path, str(tmp_path / 'cache'))
