"""'array_record': our ArrayRecord shards (data/storage/records.py; written by `python -m vlp_jax.convert`). The
comma-separated sources of `config.data.path`: each a directory or glob of shards, 'synthetic' (the embedded
dataset's training shards) or 'tfds:NAME:SPLIT' (a prepared tfds split, written once as shards into the cache
directory). Training data only: the 'train' split."""
from __future__ import annotations

import glob
import os

import ml_collections

from vlp_jax import paths as paths_lib
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.sources import tfds_splits as tfds_sources
from vlp_jax.data.formats import DATA_FORMATS, TrainingData
from vlp_jax.errors import ConfigError, DataNotFoundError

PREPARE_HELP = (
    'Prepare the data first: convert your image-text pairs (a TSV/CSV of paths and captions, img2dataset webdataset '
    'tars, or a folder of images with a JSONL file) into ArrayRecord shards with\n'
    '  python -m vlp_jax.convert --format=webdataset --input=/data/cc3m_wds --output=/data/cc3m_shards\n'
    'then pass --config.data.path=/data/cc3m_shards (docs/data.md).')


def remote_shards_error(item: str) -> ConfigError:
  """array_record's reader opens local files only (the pip build has no object-store file system; asked for a gs://
  path it waits on the network instead of failing), so a remote entry is refused at start, not in a data worker."""
  return ConfigError(
      f"config.data.path entry '{item}' is on an object store, and ArrayRecord shards can only be read from local "
      "(or mounted) paths. Either train on webdataset tars there (--config.data.name=webdataset "
      f"--config.data.path='{item.rstrip('/')}/{{00000..NNNNN}}.tar'), or copy the shards to a local disk or mount "
      "the bucket (e.g. gcsfuse) and pass that local path.")


def source_paths(item: str, data: ml_collections.ConfigDict) -> list[str]:
  """The training shards of one entry of config.data.path (see the module docstring)."""
  if item == 'synthetic':
    return synthetic.config_split_paths(data, 'train')
  if item.startswith('tfds:'):
    name, _, split = item[len('tfds:'):].partition(':')
    return tfds_sources.training_shards(name, split or 'train', data.tfds_dir or None,
                                        data.cache_dir or synthetic.default_cache_dir())
  if paths_lib.is_remote(item):
    raise remote_shards_error(item)
  pattern = item if any(c in item for c in '*?[') else os.path.join(item, '*.array_record')
  paths = sorted(glob.glob(pattern))
  if not paths:
    raise DataNotFoundError(f"config.data.path entry '{item}' holds no ArrayRecord shards (looked for {pattern}).\n"
                            + PREPARE_HELP)
  return paths


@DATA_FORMATS.register('array_record')
class ArrayRecordData(TrainingData):
  shard_suffix = '.array_record'

  def split_paths(self, split: str) -> list[str]:
    if split != 'train':
      raise ValueError(f"array_record data at config.data.path has only the 'train' split, not '{split}'")
    if not self.data.path.strip():
      raise DataNotFoundError('config.data.path is empty: this config trains on data you prepare yourself.\n'
                              + PREPARE_HELP)
    return [path for item in self.data.path.split(',') if item.strip()
            for path in source_paths(item.strip(), self.data)]
