"""'webdataset': tar shards read as they are (data/sources/webdataset_tars.py), no conversion pass. `config.data.path`
holds comma-separated sources, each [NAME=]PATTERN with brace ranges or globs ('laion=/data/laion/{00000..41455}.tar');
options under `config.data.webdataset`. Training data only: the 'train' split."""
from __future__ import annotations

import functools
from typing import Any

import ml_collections

from vlp_jax import paths as path_lib
from vlp_jax.data.sources import synthetic_shapes as synthetic, webdataset_tars as webdataset
from vlp_jax.data.formats import DATA_FORMATS, RecordsReader, TrainingData
from vlp_jax.errors import DataNotFoundError


def shards(data: ml_collections.ConfigDict) -> list[tuple[str, str]]:
  """[(tar path, source name)] of `config.data.path`, in order."""
  if not data.path.strip():
    raise DataNotFoundError("config.data.path is empty: name the tar shards, e.g. "
                            "--config.data.path='laion=/data/laion/{00000..41455}.tar'")
  found = []
  for name, pattern in webdataset.parse_sources(data.path):
    paths = webdataset.shard_paths(pattern)
    # a path of which no shard exists (local or on an object store) is a wrong path, not a broken shard (exit 2
    # with the fix, not 4); one that exists is enough, so a remote pattern costs one request here
    if not paths or not any(path_lib.exists(path) for path in paths):
      raise webdataset.missing_pattern_error(pattern)
    found.extend((path, name) for path in paths)
  return found


def fields(data: ml_collections.ConfigDict) -> webdataset.Fields:
  """Which members of a sample hold its image and its caption (config.data.webdataset)."""
  keys = tuple(k.strip().lower() for k in data.webdataset.image_keys.split(',') if k.strip())
  return webdataset.Fields(image_keys=keys, caption_key=data.webdataset.caption_key.strip())


@DATA_FORMATS.register('webdataset')
class WebDatasetData(TrainingData):
  """Sources are named in config.data.path (unnamed: after their folder); samples are read from the tars by offset
  through an index of each shard, built once and cached."""
  shard_suffix = '.tar'

  @classmethod
  def carries_regions(cls, data: ml_collections.ConfigDict) -> bool:
    del data
    return False  # a sample gives an image and a caption (docs/data.md); convert to ArrayRecord for regions

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    # the image is the first member present of image_keys; the caption a member ('txt') or a field of the JSON
    # member ('json:caption')
    return {'image_keys': 'jpg,png,jpeg,webp', 'caption_key': 'txt'}

  def split_paths(self, split: str) -> list[str]:
    if split != 'train':
      raise ValueError(f"webdataset data at config.data.path has only the 'train' split, not '{split}'")
    return [path for path, _ in shards(self.data)]

  def shard_sources(self, paths: list[str]) -> list[str]:
    return [source for _, source in shards(self.data)]

  def records_reader(self, paths: list[str], sources: list[str], read: list[str]) -> RecordsReader:
    members = fields(self.data)
    cache_dir = self.data.cache_dir or synthetic.default_cache_dir()
    indexes = webdataset.index_shards(read, members, cache_dir)
    webdataset.check_unreadable(read, indexes.unreadable, self.data.max_bad_fraction)
    self.index_bytes = sum(i.rows.nbytes + i.keys.nbytes for i in indexes.by_path.values())
    return functools.partial(webdataset.TarShardRecords, sources=dict(zip(paths, sources)), fields=members,
                             indexes=indexes, cache_dir=cache_dir)
