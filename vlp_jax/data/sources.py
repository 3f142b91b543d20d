"""Where the training shards are: `config.data.name` 'synthetic' (the embedded dataset, generated on first use into
`config.data.cache_dir`), 'array_record' (the comma-separated sources of `config.data.path`: directories or globs
of our shards, 'synthetic', or 'tfds:NAME:SPLIT', a prepared tfds split written once as shards) or 'webdataset'
(tar shards read as they are, data/webdataset.py)."""
from __future__ import annotations

import glob
import os

import ml_collections

from vlp_jax.data import synthetic
from vlp_jax.data import tfds as tfds_sources
from vlp_jax.data import webdataset
from vlp_jax.errors import DataNotFoundError

TRAIN_DATASETS = ('synthetic', 'array_record', 'webdataset')


def synthetic_spec(data: ml_collections.ConfigDict) -> synthetic.SyntheticSpec:
  s = data.synthetic
  return synthetic.SyntheticSpec(seed=s.seed, resolution=s.resolution, num_train=s.num_train, num_val=s.num_val,
                                 num_test=s.num_test, sources=tuple(s.sources), shards=s.shards,
                                 captions=s.captions, long_captions=s.long_captions)


def train_paths(data: ml_collections.ConfigDict) -> list[str]:
  """The ArrayRecord files to train on."""
  return split_paths(data, 'train')


def split_paths(data: ml_collections.ConfigDict, split: str) -> list[str]:
  """The ArrayRecord files of a split of the configured dataset (array_record data has only 'train')."""
  if data.name == 'synthetic':
    if split not in synthetic.SPLITS:
      raise ValueError(f"split '{split}' is not valid; valid choices: {list(synthetic.SPLITS)}")
    root = synthetic.ensure_dataset(synthetic_spec(data), data.cache_dir or None)
    return synthetic.shard_paths(root, split, tuple(data.synthetic.sources))
  if data.name == 'webdataset':
    if split != 'train':
      raise ValueError(f"webdataset data at config.data.path has only the 'train' split, not '{split}'")
    return [path for path, _ in webdataset_shards(data)]
  if data.name == 'array_record':
    if split != 'train':
      raise ValueError(f"array_record data at config.data.path has only the 'train' split, not '{split}'")
    if not data.path.strip():
      raise DataNotFoundError('config.data.path is empty: this config trains on data you prepare yourself.\n'
                              + PREPARE_HELP)
    return [path for item in data.path.split(',') if item.strip() for path in source_paths(item.strip(), data)]
  raise ValueError(f"config.data.name='{data.name}' is not a known dataset; valid choices: {sorted(TRAIN_DATASETS)}")


def webdataset_shards(data: ml_collections.ConfigDict) -> list[tuple[str, str]]:
  """[(tar path, source name)] of `config.data.path` for webdataset data, in order."""
  if not data.path.strip():
    raise DataNotFoundError("config.data.path is empty: name the tar shards, e.g. "
                            "--config.data.path='laion=/data/laion/{00000..41455}.tar'")
  shards = []
  for name, pattern in webdataset.parse_sources(data.path):
    paths = webdataset.shard_paths(pattern)
    if not paths:
      raise webdataset.missing_pattern_error(pattern)
    shards.extend((path, name) for path in paths)
  return shards


def webdataset_fields(data: ml_collections.ConfigDict) -> webdataset.Fields:
  keys = tuple(k.strip().lower() for k in data.webdataset.image_keys.split(',') if k.strip())
  return webdataset.Fields(image_keys=keys, caption_key=data.webdataset.caption_key.strip())


PREPARE_HELP = (
    'Prepare the data first: convert your image-text pairs (a TSV/CSV of paths and captions, img2dataset webdataset '
    'tars, or a folder of images with a JSONL file) into ArrayRecord shards with\n'
    '  python -m vlp_jax.convert --format=webdataset --input=/data/cc3m_wds --output=/data/cc3m_shards\n'
    'then pass --config.data.path=/data/cc3m_shards (docs/data.md).')


def source_paths(item: str, data: ml_collections.ConfigDict) -> list[str]:
  """The training shards of one entry of config.data.path: a directory or glob of our shards, 'synthetic' (the
  embedded dataset's training shards) or 'tfds:NAME:SPLIT' (a prepared tfds split, written once as shards into the
  cache directory)."""
  if item == 'synthetic':
    root = synthetic.ensure_dataset(synthetic_spec(data), data.cache_dir or None)
    return synthetic.shard_paths(root, 'train', tuple(data.synthetic.sources))
  if item.startswith('tfds:'):
    name, _, split = item[len('tfds:'):].partition(':')
    return tfds_sources.training_shards(name, split or 'train', data.tfds_dir or None,
                                     data.cache_dir or synthetic.default_cache_dir())
  pattern = item if any(c in item for c in '*?[') else os.path.join(item, '*.array_record')
  paths = sorted(glob.glob(pattern))
  if not paths:
    raise DataNotFoundError(f"config.data.path entry '{item}' holds no ArrayRecord shards (looked for {pattern}).\n"
                            + PREPARE_HELP)
  return paths
