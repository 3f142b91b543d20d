"""The one ArrayRecord shard writer (data/storage/shard_writer.py), behind records.write_shards and the converter:
hidden temporary shards renamed into place, nothing left after a failure, and the bytes of a plain group_size:1
writer."""
import glob
import os

import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from vlp_jax.data.storage import records, shard_writer


def _example(i: int) -> dict:
  return {'image': bytes([i]) * (i + 1), 'caption': f'caption {i}', 'long_caption': '', 'label': i, 'source': 's',
          'key': str(i)}


def _read(path: str) -> list[bytes]:
  reader = ArrayRecordReader(path)
  try:
    return list(reader.read_all())
  finally:
    reader.close()


def test_write_shards_writes_the_bytes_of_a_plain_writer(tmp_path):
  """The embedded dataset is generated through write_shards: its bytes (and so its cache) must not change."""
  paths = records.write_shards((_example(i) for i in range(3)), str(tmp_path / 'new'), 'val', 3, 4)
  assert [os.path.basename(p) for p in paths] == [f'val-0000{i}-of-00004.array_record' for i in range(4)]
  assert sorted(os.listdir(tmp_path / 'new')) == [os.path.basename(p) for p in paths]  # no temporary file left
  os.makedirs(tmp_path / 'old')
  for index, (start, stop) in enumerate([(0, 0), (0, 1), (1, 2), (2, 3)]):  # np.linspace's contiguous ranges
    reference = str(tmp_path / 'old' / f'{index}.array_record')
    writer = ArrayRecordWriter(reference, 'group_size:1')
    for i in range(start, stop):
      writer.write(records.serialize(_example(i)))
    writer.close()
    with open(paths[index], 'rb') as new, open(reference, 'rb') as old:
      assert new.read() == old.read(), index


def test_shards_stay_hidden_until_published(tmp_path):
  with shard_writer.ShardWriter(str(tmp_path), 'train', per_shard=2) as writer:
    for i in range(5):
      writer.write(b'record %d' % i)
  assert [os.path.basename(p) for p in writer.paths] == [f'.train-0000{i}.array_record.tmp' for i in range(3)]
  assert not glob.glob(str(tmp_path / '*.array_record'))
  paths = shard_writer.publish(writer.paths, str(tmp_path), 'train')
  assert sorted(os.listdir(tmp_path)) == [f'train-0000{i}-of-00003.array_record' for i in range(3)]
  assert [r for p in paths for r in _read(p)] == [b'record %d' % i for i in range(5)]


def test_a_failure_leaves_no_shard(tmp_path):
  with pytest.raises(RuntimeError, match='disk on fire'):
    with shard_writer.ShardWriter(str(tmp_path), 'train', per_shard=1) as writer:
      writer.write(b'one')
      writer.write(b'two')
      raise RuntimeError('disk on fire')
  assert len(writer.paths) == 2 and os.listdir(tmp_path) == []


def test_shard_file_names():
  assert shard_writer.shard_name('train', 3, 12) == 'train-00003-of-00012.array_record'
  for name in ('train-00003-of-00012.array_record', '.train-00003.array_record.tmp'):
    assert shard_writer.is_shard_file(name, ('val', 'train')), name
  for name in ('train-3-of-12.array_record', 'training-00003-of-00012.array_record', 'train-00003.array_record'):
    assert not shard_writer.is_shard_file(name, ('train',)), name
