"""Shard readers at real scale (issue 61 items 2 and 3): a bounded number of open files whatever the number of shards
read, the open-files limit raised at start, and the webdataset index shared through a memory-mapped file rather than
copied into each grain worker."""
import gc
import os
import pickle
import resource

import numpy as np
import pytest

from support import write_webdataset
from vlp_jax.data.sources import webdataset_tars as webdataset
from vlp_jax.data.storage import records, shards


def open_descriptors() -> int:
  return len(os.listdir('/proc/self/fd'))


@pytest.fixture
def soft_limit_1024():
  """The common soft open-files limit, for the duration of a test: readers keep shards.MIN_OPEN_SHARDS open."""
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  if hard != resource.RLIM_INFINITY and hard < 1024:
    pytest.skip(f'the hard open-files limit is {hard}')
  resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
  yield shards.open_shards_budget()
  resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _example(i: int) -> dict:
  return {'image': records.encode_png(np.full((2, 2, 3), i % 256, np.uint8)), 'caption': f'caption {i}',
          'long_caption': '', 'label': -1, 'source': 'toy', 'key': f'k{i}'}


@pytest.mark.skipif(not os.path.isdir('/proc/self/fd'), reason='counts open files through /proc')
def test_webdataset_reader_keeps_a_bounded_number_of_shards_open(tmp_path, soft_limit_1024):
  budget = soft_limit_1024
  assert budget == shards.MIN_OPEN_SHARDS
  num_shards = budget + 48
  paths = write_webdataset(str(tmp_path), {'web': num_shards}, samples_per_shard=1, side=2, broken=False)['web']
  data = webdataset.TarShardRecords(paths, cache_dir=str(tmp_path / 'cache'))
  before = open_descriptors()
  read = [data[i] for i in range(len(data))]
  assert [shard for shard, _ in read] == list(range(num_shards))  # every shard was read
  assert open_descriptors() - before <= budget
  del data, read
  gc.collect()
  assert open_descriptors() <= before  # closed when the reader goes


@pytest.mark.skipif(not os.path.isdir('/proc/self/fd'), reason='counts open files through /proc')
def test_array_record_reader_keeps_a_bounded_number_of_shards_open(tmp_path, soft_limit_1024):
  budget = soft_limit_1024
  num_shards = budget + 48
  paths = records.write_shards((_example(i) for i in range(num_shards)), str(tmp_path), 'train', num_shards,
                               num_shards)
  data = shards.ShardRecords(paths)
  before = open_descriptors()
  read = [data[i] for i in range(len(data))]
  assert [shard for shard, _ in read] == list(range(num_shards))
  assert [records.deserialize(record)['key'] for _, record in read] == [f'k{i}' for i in range(num_shards)]
  assert open_descriptors() - before <= budget


def test_open_handles_close_the_least_recently_used_but_never_one_in_use():
  log = []
  handles = shards.OpenHandles(lambda key: log.append(('open', key)) or f'h{key}',
                               lambda handle: log.append(('close', handle)), capacity=2)
  for key in (1, 2, 1, 3):  # 2 is the least recently used when 3 comes
    with handles.use(key) as handle:
      assert handle == f'h{key}'
  assert log == [('open', 1), ('open', 2), ('open', 3), ('close', 'h2')] and len(handles) == 2
  log.clear()
  with handles.use(1), handles.use(3), handles.use(4):  # all three in use: none can be closed yet
    assert log == [('open', 4)] and len(handles) == 3
  assert len(log) == 2 and log[1][0] == 'close' and len(handles) == 2  # back to capacity once one is released
  handles.close_all()
  assert len(handles) == 0 and sorted(handle for _, handle in log[1:]) == ['h1', 'h3', 'h4']


@pytest.mark.parametrize('soft, budget', [(256, 32), (1024, 32), (20_000, 78), (65_536, 256), (1 << 20, 1024),
                                          (resource.RLIM_INFINITY, 1024)])
def test_the_open_shards_budget_is_a_256th_of_the_limit_within_bounds(monkeypatch, soft, budget):
  monkeypatch.setattr(resource, 'getrlimit', lambda kind: (soft, resource.RLIM_INFINITY))
  assert shards.open_shards_budget() == budget
  # 16 grain workers of one source keep at least half of a limit of 1,024 or more free
  assert soft == resource.RLIM_INFINITY or soft < 1024 or 16 * budget <= soft // 2


def test_the_soft_open_files_limit_is_raised_to_the_hard_limit():
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  if hard != resource.RLIM_INFINITY and hard <= 64:
    pytest.skip(f'the hard limit ({hard}) leaves nothing to raise')
  try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    now_soft, now_hard = shards.raise_open_files_limit()
    assert now_hard == hard and now_soft > 64
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (now_soft, now_hard)
    if hard != resource.RLIM_INFINITY:
      assert now_soft == hard
  finally:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _pickled_reader(tmp_path, samples_per_shard: int) -> tuple[webdataset.TarShardRecords, bytes]:
  root = tmp_path / f'n{samples_per_shard}'
  paths = write_webdataset(str(root), {'web': 2}, samples_per_shard=samples_per_shard, side=2, broken=False)['web']
  data = webdataset.TarShardRecords(paths, cache_dir=str(root / 'cache'))
  return data, pickle.dumps(data)


def test_what_a_worker_receives_does_not_grow_with_the_samples(tmp_path):
  small, small_pickle = _pickled_reader(tmp_path, 4)
  large, large_pickle = _pickled_reader(tmp_path, 400)
  assert len(large) == 100 * len(small)
  # 792 more samples would cost about 32 kB as an in-memory index (40 bytes each); as a mapped file, a few bytes of
  # path (the temporary folders' names differ in length)
  assert len(large_pickle) - len(small_pickle) < 256, (len(small_pickle), len(large_pickle))
  copy = pickle.loads(large_pickle)
  assert isinstance(copy._rows, np.memmap) and isinstance(copy._keys, np.memmap)  # pylint: disable=protected-access
  for index in (0, 1, 399, 400, 799):  # the worker's copy reads what the original reads
    assert copy[index][0] == large[index][0]
    assert copy[index][1] == large[index][1]
