"""Resource budgets at real size (issue 61 check d): the input pipeline reads a full epoch of 2,000 shards, webdataset
tars and ArrayRecord files, in a process whose open-files limit is 256 (soft and hard, as `ulimit -n 256`), with a
bounded number of files open throughout."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from support import ROOT, write_webdataset
from vlp_jax.data.storage import records

pytestmark = pytest.mark.slow  # writes 4,000 shards and reads them in a subprocess

NUM_SHARDS = 2000
LIMIT = 256

# Reads one epoch of every shard through the training pipeline (train_iterator: a global shuffle, 16 reader threads)
# under the limit, and prints how many shards it read and the most files it had open.
READER = r'''
import json, os, resource, sys
import grain
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import webdataset_tars as webdataset
from vlp_jax.data.storage import shards
from vlp_jax.data.formats import webdataset as webdataset_format

resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
shards.raise_open_files_limit()  # what the trainer does: nothing to raise here


class FirstPixel(grain.transforms.RandomMap):
  def random_map(self, example, rng):
    return {'pixel': example['image'][0, 0]}


def epoch(paths, shard_records, sources=None):
  settings = pipeline.PipelineSettings(seed=0, global_batch_size=40, num_threads=16)
  iterator = pipeline.train_iterator(paths, FirstPixel(), settings, shard_records=shard_records, sources=sources)
  read, most_open = set(), 0
  for _ in range(len(paths) // 40):
    read.update(next(iterator)['record_shard'].tolist())
    most_open = max(most_open, len(os.listdir('/proc/self/fd')))
  return {'shards_read': len(read), 'most_open': most_open}


with open(sys.argv[1]) as f:
  tars, array_records, cache = json.load(f)
indexes = webdataset.index_shards(tars, cache_dir=cache)
tar_reader = lambda paths, ids: webdataset.TarShardRecords(paths, ids, indexes=indexes, cache_dir=cache)
print(json.dumps({'webdataset': epoch(tars, tar_reader, ['web'] * len(tars)), 'array_record': epoch(array_records, shards.ShardRecords)}))
'''.replace('OPEN_FILES', str(LIMIT))


@pytest.mark.skipif(not os.path.isdir('/proc/self/fd'), reason='counts open files through /proc')
def test_an_epoch_of_2000_shards_reads_under_an_open_files_limit_of_256(tmp_path):
  tars = write_webdataset(str(tmp_path / 'wds'), {'web': NUM_SHARDS}, samples_per_shard=1, side=2, broken=False)['web']
  examples = ({'image': records.encode_png(np.full((2, 2, 3), i % 256, np.uint8)), 'caption': f'caption {i}',
               'long_caption': '', 'label': -1, 'source': 'toy', 'key': f'k{i}'} for i in range(NUM_SHARDS))
  array_records = records.write_shards(examples, str(tmp_path / 'ar'), 'train', NUM_SHARDS, NUM_SHARDS)
  arguments = tmp_path / 'shards.json'
  arguments.write_text(json.dumps([tars, array_records, str(tmp_path / 'cache')]))
  run = subprocess.run([sys.executable, '-c', READER, str(arguments)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  result = json.loads(run.stdout.strip().splitlines()[-1])
  for name in ('webdataset', 'array_record'):
    assert result[name]['shards_read'] == NUM_SHARDS, result  # an epoch reads every shard once
    assert result[name]['most_open'] < LIMIT // 2, result
