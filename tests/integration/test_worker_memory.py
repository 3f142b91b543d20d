"""Per-worker memory at real size (issue 61 check d): grain's worker processes map the webdataset index rather than
receive a copy of it, so their own memory stays flat as the index grows, whatever their number."""
import os

import grain
import numpy as np
import psutil
import pytest

from support import write_webdataset
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import webdataset_tars as webdataset

pytestmark = pytest.mark.slow  # starts grain worker processes

LARGE = 2_000_000  # samples: an index of about 80 MB


class FirstPixel(grain.transforms.RandomMap):
  def random_map(self, example, rng):
    return {'pixel': example['image'][0, 0]}


def private_bytes(pid: int) -> int:
  """A process's resident anonymous memory (RssAnon): what copies cost it; mapped files' pages are shared."""
  with open(f'/proc/{pid}/status') as f:
    return int(next(line for line in f if line.startswith('RssAnon:')).split()[1]) * 1024


def workers_memory(tar: str, samples: int, num_workers: int, cache_dir: str) -> list[int]:
  """The private memory of each grain worker once it has made a few batches from an index of `samples` samples
  (every one a copy of the tar's single sample, so that all of them read)."""
  one = webdataset.index_shards([tar]).by_path[tar]
  indexes = webdataset.ShardIndexes({tar: webdataset.ShardIndex(np.repeat(one.rows, samples),
                                                                np.repeat(one.keys, samples), '')}, [])
  reader = lambda paths, ids: webdataset.TarShardRecords(paths, ids, indexes=indexes, cache_dir=cache_dir)  # noqa: E731
  iterator = pipeline.train_iterator([tar], FirstPixel(), pipeline.PipelineSettings(seed=0, global_batch_size=8,
                                     process_index=0, process_count=1, num_workers=num_workers), shard_records=reader,
                                     sources=['web'])
  for _ in range(4 * num_workers):
    next(iterator)
  children = psutil.Process().children(recursive=True)
  memory = [private_bytes(child.pid) for child in children]
  del iterator
  return memory


@pytest.mark.skipif(not os.path.exists('/proc/self/status'), reason='reads resident memory from /proc')
def test_worker_memory_does_not_grow_with_the_index_nor_the_workers(tmp_path):
  tar = write_webdataset(str(tmp_path), {'web': 1}, samples_per_shard=1, side=2, broken=False)['web'][0]
  small = workers_memory(tar, 100, 1, str(tmp_path / 'cache'))
  large = workers_memory(tar, LARGE, 2, str(tmp_path / 'cache'))
  assert len(small) >= 1 and len(large) >= 2
  index_bytes = LARGE * (webdataset._INDEX_DTYPE.itemsize + 10)  # pylint: disable=protected-access
  # each worker of the large index holds less than a quarter of it more than the small index's worker
  assert max(large) - max(small) < index_bytes // 4, (small, large, index_bytes)
