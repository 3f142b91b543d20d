"""Training data formats by name (`config.data.name`): where a split's shards are, how their records are read, and
the format's own options and checks. A format is one file of this package: a `TrainingData` subclass registered with
`@DATA_FORMATS.register('name')`; `train_batches` is the one call that turns a config into training batches.

Records. `records_reader` gives `pipeline.train_iterator` random access to (shard id, record) pairs, where a record
is one of:
  - bytes: a serialized example of data/storage/records.py (ArrayRecord shards);
  - a dict: an example with the image still encoded, {'image': bytes, <caption field>: str, 'key': str, 'label':
    int, 'source': str, ...} (webdataset samples); or {'bad': reason, 'detail': text} for a sample that cannot be
    used (reason one of records.SKIP_REASONS), which the pipeline replaces and counts like a bad record.
`pipeline.LoadExamples` decodes both.
"""
from __future__ import annotations

import glob
import os
from typing import Any, Callable

import grain
import ml_collections

from vlp_jax.data.loading import mixing, pipeline, teacher_table as teacher
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records, shards
from vlp_jax.data.loading.record_stats import RecordStats
from vlp_jax.data.storage.shards import ShardRecords
from vlp_jax.registry import Registry

# (shard paths, their shard ids) -> random access to (shard id, record) (data/storage/shards.py ShardRecords is the
# model)
RecordsReader = Callable[[list[str], list[int]], Any]


class TrainingData:
  """A training data format: subclasses set `name` (via `@DATA_FORMATS.register`) and implement `split_paths`."""
  name: str = ''
  reads_path = True  # whether config.data.path says where the data is (the embedded dataset's does not)
  shard_suffix = ''  # the file name ending of its shards, by which `formats_of_files` recognises a folder of them
  index_bytes = 0  # bytes of the index `records_reader` built, memory-mapped (one copy per host); 0: none

  @classmethod
  def carries_regions(cls, data: ml_collections.ConfigDict) -> bool:
    """Whether records of this format, as `data` configures it, can hold `regions` (boxes and their texts, for
    LocCa's location tasks). True by default: a record of data/storage/records.py may."""
    del data
    return True

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    """The format's own options, under `config.data.<name>`, with their defaults ({}: none). Every format's options
    are in every config (the embedded dataset's also serve evaluation), so they are checked whatever data.name is."""
    return {}

  @classmethod
  def validate(cls, data: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the key when an option of `config.data.<name>` is invalid. Cheap: reads no data."""

  def __init__(self, data: ml_collections.ConfigDict):
    self.data = data  # config.data

  def split_paths(self, split: str) -> list[str]:
    """The shard files of `split` ('train', 'val', 'test'); DataNotFoundError saying how to prepare missing data,
    ValueError for a split the format does not have."""
    raise NotImplementedError

  def shard_sources(self, paths: list[str]) -> list[str]:
    """The source name of each shard (what the mixing modes and per-source metrics go by): by default read from
    the shards' records (`mixing.shard_sources`; every shard one source unless batches are 'mixed')."""
    return mixing.shard_sources(paths, strict=self.data.mixing != 'mixed')

  def records_reader(self, paths: list[str], sources: list[str], read: list[str]) -> RecordsReader:
    """How shards are read: `sources` are `shard_sources(paths)`; `read` lists the shards of `paths` this process
    reads (all of them, or its own with data.shards_by_process), for a format that prepares something per shard
    first (an index)."""
    del paths, sources, read
    return ShardRecords


DATA_FORMATS: Registry[type[TrainingData]] = Registry('training data format', 'data.name',
                                                      package='vlp_jax.data.formats')


def data_format(data: ml_collections.ConfigDict) -> TrainingData:
  """The format `config.data.name` bound to `data` (config.data)."""
  return DATA_FORMATS.get(data.name)(data)


def options() -> dict[str, Any]:
  """{name: default options} of every format that has options: the format keys of `config.data`."""
  return {name: fmt.default_config() for name, fmt in DATA_FORMATS.items() if fmt.default_config()}


def formats_of_files(path_setting: str) -> list[str]:
  """The names of the formats whose shards (by `shard_suffix`) are at the local entries of a `config.data.path`
  setting (comma-separated folders, files or globs): what to suggest for a path given with the wrong data.name."""
  found = set()
  for item in (i.strip() for i in path_setting.split(',') if i.strip()):
    names = os.listdir(item) if os.path.isdir(item) else [os.path.basename(p) for p in glob.glob(item)]
    found.update(name for name, fmt in DATA_FORMATS.items()
                 if fmt.shard_suffix and any(n.endswith(fmt.shard_suffix) for n in names))
  return sorted(found)


def check_path_is_read(data: ml_collections.ConfigDict) -> None:
  """ValueError when config.data.path is set but the chosen format reads none (it would be ignored)."""
  if data.path.strip() and not DATA_FORMATS.get(data.name).reads_path:
    readers = sorted(name for name, fmt in DATA_FORMATS.items() if fmt.reads_path)
    found = formats_of_files(data.path)
    hint = (f"its files look like '{found[0]}' shards: add --config.data.name={found[0]}" if len(found) == 1 else
            f'add --config.data.name=NAME to read it, NAME one of {readers}')
    raise ValueError(f"config.data.path='{data.path}' is set, but config.data.name='{data.name}' reads no path "
                     f"and would train on other data; {hint} (docs/data.md), or drop config.data.path")


def train_paths(data: ml_collections.ConfigDict) -> list[str]:
  """The training shards of `config.data`; fails early, saying how to prepare them, when they are missing."""
  return data_format(data).split_paths('train')


def split_paths(data: ml_collections.ConfigDict, split: str) -> list[str]:
  """The shards of a split of the configured data."""
  return data_format(data).split_paths(split)


def split_texts(data: ml_collections.ConfigDict, split: str) -> list[str]:
  """Every text of a split's records, in record order: each record's caption (`config.data.caption_field`), then its
  region descriptions. A record that cannot be read, or whose regions are malformed, gives none, as training skips
  it. Reads every record once (images stay encoded): for data small enough to scan at start-up, such as the
  embedded dataset (the decoder's vocabulary of objectives/siglip2.py)."""
  fmt = data_format(data)
  paths = fmt.split_paths(split)
  shards = fmt.records_reader(paths, fmt.shard_sources(paths), paths)(paths, list(range(len(paths))))
  texts = []
  chunk = 1024
  for start in range(0, len(shards), chunk):
    for _, record in shards.__getitems__(list(range(start, min(start + chunk, len(shards))))):
      try:
        example = record if isinstance(record, dict) else records.deserialize(record)
        if 'bad' in example:
          continue
        regions = records.decode_regions(example['regions']) if example.get('regions') is not None else None
      except records.BadRecordError:
        continue
      texts.append(str(example.get(data.caption_field) or ''))
      texts.extend(regions.texts if regions is not None else ())
  return texts


def train_batches(data: ml_collections.ConfigDict, paths: list[str], views: grain.transforms.RandomMap, *, seed: int,
                  batch_size: int, process_index: int, process_count: int
                  ) -> tuple[grain.DatasetIterator, RecordStats]:
  """This process's endless training batches from `paths` (`train_paths(data)`) under `views` (the objective's),
  checkpointable with the state, and the counter of bad records by shard and source. batch_size is global.
  With data.shards_by_process each process reads and indexes only its own shards."""
  fmt = data_format(data)
  shards.raise_open_files_limit()  # before grain's workers start (they inherit it): shards, sockets, checkpoints
  own = pipeline.process_shards(len(paths), process_index, process_count) if data.shards_by_process else None
  if own is not None:
    print(f'Process {process_index} of {process_count} reads {len(own)} of the {len(paths)} shards: '
          f'{paths[own[0]]}, ...', flush=True)
  sources = fmt.shard_sources(paths)
  reader = fmt.records_reader(paths, sources, paths if own is None else [paths[i] for i in own])
  # mapped by every worker, never copied into each (data/loading/teacher_table.py)
  teacher_path = (teacher.prepare_table(data.teacher_embeddings, data.cache_dir or synthetic.default_cache_dir())
                  if data.teacher_embeddings else '')
  settings = pipeline.pipeline_settings(data, seed=seed, global_batch_size=batch_size, process_index=process_index,
                                        process_count=process_count, teacher_path=teacher_path)
  iterator = pipeline.train_iterator(paths, views, settings, sources=sources, shard_records=reader, shard_ids=own)
  stats = RecordStats(paths, mixing.source_names(sources), data.max_bad_fraction, data.bad_data_alpha)
  stats.mapped_bytes = {name: size for name, size in (('webdataset index', fmt.index_bytes),
                                                      ('teacher table', teacher.table_bytes(teacher_path))) if size}
  return iterator, stats
