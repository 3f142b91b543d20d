"""The grain pipeline that every dataset goes through: ArrayRecord -> decode -> the objective's views -> batch.

Training: one global order of examples (by default one shuffle over every shard, reshuffled each epoch; with
`config.data.mixing` each global batch comes from a single source, see data/loading/mixing.py). Views are made before
the processes split the order, and process p reads block p of every global batch, so the global batch, in the same row
order, is the same whatever the number of processes. The iterator state is a single index, saved with every
checkpoint.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import grain
from absl import flags
import ml_collections
import numpy as np

from vlp_jax.data.loading import mixing as mixing_lib
from vlp_jax.data.storage import records
from vlp_jax.data.storage.shards import ShardRecords
from vlp_jax.data.loading.teacher_table import load_table
from vlp_jax.errors import DataError
from vlp_jax.registry import check_choice

# Per-example fields the pipeline adds beside the views' own; the loop pops them before the batch goes to the devices.
STATUS_KEYS = ('record_error', 'record_shard', 'record_source', 'record_key', 'record_detail')
# How many records after a bad one are tried as its substitute before the data is declared unusable.
MAX_SUBSTITUTES = 64
# A bad record's description is cut to this many characters: a batch's text fields are as wide as the longest.
MAX_DETAIL_CHARS = 200


class LoadExamples(grain.MapDataset):
  """(shard id, record bytes or a webdataset sample) elements -> decoded examples (image [H, W, 3] uint8, captions
  as strings, and 'teacher' [d] float32 looked up by key when `teacher_path` is set), never failing on a bad record.

  A bad record (records.SKIP_REASONS: not a record, empty / corrupt / huge image, empty caption, malformed regions,
  which are decoded to records.Regions) at position i is
  replaced by the first good record at i + 1, i + 2, ... of the same stream, so batch shapes never change and, since
  the stream is one source's in single-source mixing, batches stay single-source. Each example carries
  'record_error' (0, or 1 + the index of the skip reason of the record at position i), 'record_shard' (the shard id
  of that record), 'record_source' (the index of its source in `source_names`, len(source_names) for any other),
  and for a bad record at i its 'record_key' ('' where unreadable) and 'record_detail' (what is wrong; '' for a good
  record), which data/loading/record_stats.py prints.
  """

  def __init__(self, parent: grain.MapDataset, shard_paths: list[str], source_names: tuple[str, ...] = (),
               caption_field: str = 'caption', teacher_path: str = ''):
    super().__init__(parent)
    self._shard_paths, self._source_names = list(shard_paths), tuple(source_names)
    self._caption_field, self._teacher_path = caption_field, teacher_path

  def __len__(self) -> int:
    return len(self._parent)

  def _load(self, record: bytes | dict[str, Any]) -> dict[str, Any]:
    if isinstance(record, dict):  # a webdataset sample (data/sources/webdataset_tars.py), read from its tar
      if 'bad' in record:
        raise records.BadRecordError(record['bad'], record['detail'], record.get('key', ''))
      example = dict(record)
    else:
      example = records.deserialize(record)
    try:
      if not str(example.get(self._caption_field) or '').strip():
        raise records.BadRecordError('empty_caption', f"the record's '{self._caption_field}' is empty")
      example['image'] = records.decode_image(example['image'], max_aspect_ratio=records.MAX_ASPECT_RATIO)
      if example.get('regions') is not None:
        example['regions'] = records.decode_regions(example['regions'])
    except records.BadRecordError as bad:  # the record's key names it in the log
      raise records.BadRecordError(bad.reason, bad.message, str(example.get('key', ''))) from bad
    if self._teacher_path:
      example['teacher'] = load_table(self._teacher_path)[example['key']]
    return example

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    shard, record = self._parent[index]
    first_bad = None  # the record at position i when it is bad: what is counted and named
    for offset in range(MAX_SUBSTITUTES + 1):
      if offset:
        _, record = self._parent[index + offset]
      try:
        example = self._load(record)
        break
      except records.BadRecordError as bad:
        first_bad = bad if first_bad is None else first_bad
        last = bad
    else:
      raise DataError(f'{MAX_SUBSTITUTES + 1} records in a row are bad, from position {index} of the stream (in shard '
                      f'{self._shard_paths[shard]}); the last: {last}. Check the data, e.g. with '
                      "'python -m vlp_jax.convert', which counts the records it skips per reason.")
    source = example.get('source', '')
    example['record_error'] = np.int32(0 if first_bad is None else 1 + records.SKIP_REASONS.index(first_bad.reason))
    example['record_key'] = '' if first_bad is None else first_bad.key
    example['record_detail'] = '' if first_bad is None else ' '.join(first_bad.message.split())[:MAX_DETAIL_CHARS]
    example['record_shard'] = np.int32(shard)
    example['record_source'] = np.int32(
        self._source_names.index(source) if source in self._source_names else len(self._source_names))
    return example

  def __str__(self) -> str:
    return 'LoadExamples'


# The train step an example is drawn for, which the pipeline adds before the views run (`WithStep`): views that
# change over the run (SigLIP 2's, built from its switch) read it; the views' output does not carry it.
STEP_KEY = 'train_step'


@dataclasses.dataclass
class WithStep(grain.transforms.MapWithIndex):
  """Adds STEP_KEY: index // examples_per_step, the step whose batch the example at `index` of the stream lands in
  (global batch b holds elements [b G, (b + 1) G) of the global stream; a process's own stream holds its local
  batches). A function of the index alone, so resumed iterators see the same steps."""
  examples_per_step: int

  def map_with_index(self, index: int, element: dict[str, Any]) -> dict[str, Any]:
    return {**element, STEP_KEY: index // self.examples_per_step}


@dataclasses.dataclass
class WithStatus(grain.transforms.RandomMap):
  """Runs the objective's views, then copies the record-status fields (STATUS_KEYS) beside their output."""
  views: grain.transforms.RandomMap

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    out = self.views.random_map(example, rng)
    return {**out, **{k: example[k] for k in STATUS_KEYS}}


def pop_status(batch: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
  """A batch from `train_iterator` -> (the model's inputs, the record-status fields)."""
  return ({k: v for k, v in batch.items() if k not in STATUS_KEYS},
          {k: batch[k] for k in STATUS_KEYS if k in batch})


@dataclasses.dataclass
class DecodeRecord(grain.transforms.Map):
  """A serialized record -> the example with its image decoded ([H, W, 3] uint8); raises records.BadRecordError.
  For tests and tools that decode single records; training goes through LoadExamples."""

  def map(self, record: bytes) -> dict[str, Any]:
    example = records.deserialize(record)
    example['image'] = records.decode_image(example['image'])
    if example.get('regions') is not None:
      example['regions'] = records.decode_regions(example['regions'])
    return example


def passthrough(example: dict[str, Any]) -> dict[str, np.ndarray]:
  """The numeric fields every view maker keeps: the label, and the teacher vector when present."""
  out = {'label': np.int32(example['label'])}
  if 'teacher' in example:
    out['teacher'] = example['teacher']
  return out


class ProcessBlocks(grain.MapDataset):
  """Process `process_index`'s share of consecutive global batches: its local example j is global example
  (j // local_batch) * global_batch + process_index * local_batch + j % local_batch. Concatenating the processes'
  local batches in process order gives back the global batch, row for row."""

  def __init__(self, parent: grain.MapDataset, local_batch: int, process_index: int, process_count: int):
    super().__init__(parent)
    self._local_batch, self._process_index, self._process_count = local_batch, process_index, process_count
    self._length = len(parent) // process_count

  def __len__(self) -> int:
    return self._length

  def _parent_index(self, index: int) -> int:
    step, row = divmod(index, self._local_batch)
    return (step * self._process_count + self._process_index) * self._local_batch + row

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    return self._parent[self._parent_index(index)]

  def _getitems(self, indices):
    return self._parent._getitems([self._parent_index(i) for i in indices])  # pylint: disable=protected-access

  def __str__(self) -> str:
    return f'ProcessBlocks(local_batch={self._local_batch}, process={self._process_index}/{self._process_count})'


def process_shards(num_shards: int, process_index: int, process_count: int) -> list[int] | None:
  """The ids of the shards that process `process_index` reads when each process reads its own shards
  (`config.data.shards_by_process`): every `process_count`-th shard from its index, as webdataset's split by node.
  None with one process (it reads every shard: the run is the default one). Raises ValueError when there are fewer
  shards than processes."""
  if process_count == 1:
    return None
  if num_shards < process_count:
    raise ValueError(f'data.shards_by_process gives each process its own shards, and there are {num_shards} shards '
                     f'for {process_count} processes; use more shards or data.shards_by_process=False')
  return list(range(process_index, num_shards, process_count))


def process_seed(seed: int, process_index: int) -> int:
  """An independent seed for one process's own shuffle and views (data.shards_by_process)."""
  return int(np.random.SeedSequence([seed, process_index]).generate_state(1)[0])


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
  """How `train_iterator` orders, reads and batches the examples: the run's seed, global batch and process, and the
  pipeline options of config.data (`pipeline_settings` reads them from it; the defaults are a plain one-process run).

  mixing: one of data/loading/mixing.py's MODES. source_weights: 'name=w,...' for 'weighted' and 'single_source'
  mixing. caption_field: the record field that holds the caption. resampled: shards drawn with replacement,
  endlessly (mixing.ResampledShards; 'mixed' batches only). teacher_path: a prepared teacher table
  (data/loading/teacher_table.py `prepare_table`), looked up by key into each example's 'teacher'; '' for none.
  """
  seed: int
  global_batch_size: int
  process_index: int = 0
  process_count: int = 1
  num_workers: int = 0
  num_threads: int = 2
  mixing: str = 'mixed'
  source_weights: str = ''
  caption_field: str = 'caption'
  resampled: bool = False
  teacher_path: str = ''


def pipeline_settings(data: ml_collections.ConfigDict, *, seed: int, global_batch_size: int, process_index: int,
                      process_count: int, teacher_path: str = '') -> PipelineSettings:
  """The settings of a run's training pipeline: config.data's options (`data`) with the run's seed, global batch,
  process and prepared teacher table."""
  return PipelineSettings(seed=seed, global_batch_size=global_batch_size, process_index=process_index,
                          process_count=process_count, num_workers=data.num_workers, num_threads=data.num_threads,
                          mixing=data.mixing, source_weights=data.source_weights, caption_field=data.caption_field,
                          resampled=data.resampled, teacher_path=teacher_path)


def train_iterator(paths: list[str], views: grain.transforms.RandomMap, settings: PipelineSettings, *,
                   sources: list[str] | None = None,
                   shard_records: Callable[[list[str], list[int]], Any] = ShardRecords,
                   shard_ids: list[int] | None = None) -> grain.DatasetIterator:
  """An endless iterator of process-local batches ({key: [global_batch_size / process_count, ...]}): the views'
  fields, plus the record-status fields STATUS_KEYS (see LoadExamples; `pop_status` separates them).

  The random views of example i depend only on (seed, i), and each process slices the global order after they are
  made, so the global batch is the same whatever the process count. Supports `get_state()` / `set_state()`.
  settings: see PipelineSettings. sources: the source of each shard; by default read from the shards' records.
  shard_records: (shard paths, their ids) -> random access to (shard id, record) (ShardRecords for ArrayRecord,
  webdataset_tars.TarShardRecords). shard_ids: where given (`process_shards`), this process reads only these shards
  of `paths` and makes its local batches from them alone, with its own seed (`process_seed`): the global batch then
  depends on the process count, and no process reads another's shards ('mixed' batches only).
  """
  seed, global_batch_size, mixing = settings.seed, settings.global_batch_size, settings.mixing
  process_index, process_count = settings.process_index, settings.process_count
  if not paths:
    raise ValueError('the training data has no shard files')
  if global_batch_size % process_count:
    raise ValueError(f'batch_size {global_batch_size} is not divisible by the process count {process_count}')
  check_choice('data.mixing', mixing, mixing_lib.MODES)
  if sources is None:  # mixed batches take shards holding several sources; the others need one source per shard
    sources = mixing_lib.shard_sources(paths, strict=mixing != 'mixed')
  names = mixing_lib.source_names(sources)

  def load(stream: grain.MapDataset) -> grain.MapDataset:
    return LoadExamples(stream, paths, names, settings.caption_field, settings.teacher_path)

  if settings.resampled and mixing != 'mixed':
    raise ValueError(f"data.resampled draws shards for data.mixing='mixed' batches, not '{mixing}'")
  if shard_ids is not None:
    if mixing != 'mixed':  # the other modes choose each global batch's source(s) over every shard
      raise ValueError(f"data.shards_by_process makes 'mixed' batches from each process's own shards, not '{mixing}'")
    seed = process_seed(seed, process_index)
  if mixing == 'mixed':
    ids = list(range(len(paths))) if shard_ids is None else list(shard_ids)
    records_source = shard_records([paths[i] for i in ids], ids)
    if settings.resampled:
      stream = mixing_lib.ResampledShards(records_source, records_source.shard_ranges(), seed)
    else:
      stream = grain.MapDataset.source(records_source).shuffle(seed=seed).repeat()
    dataset = load(stream)
  else:
    dataset = mixing_lib.mixed_sources_dataset(paths, sources, mode=mixing, seed=seed,
                                               global_batch_size=global_batch_size, weights=settings.source_weights,
                                               load=load, shard_records=shard_records)
  local_batch = global_batch_size // process_count
  # The random views of element i are drawn from (seed, i) whatever runs before them, so this adds no draw.
  dataset = dataset.map_with_index(WithStep(global_batch_size if shard_ids is None else local_batch))
  dataset = dataset.random_map(WithStatus(views), seed=seed)
  if shard_ids is None:  # every process takes its block of each global batch; otherwise its own stream is its share
    dataset = ProcessBlocks(dataset, local_batch, process_index, process_count)
  dataset = dataset.batch(local_batch, drop_remainder=True)
  iter_dataset = dataset.to_iter_dataset(grain.ReadOptions(num_threads=settings.num_threads, prefetch_buffer_size=4))
  if settings.num_workers > 0:
    if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; outside an absl app use their defaults
      flags.FLAGS.mark_as_parsed()
    iter_dataset = iter_dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=settings.num_workers))
  fill = getattr(views, 'fill_batch', None)
  if fill is not None:  # fields the views leave to this process (SigLIP 2's placeholder views), after the workers
    iter_dataset = iter_dataset.map(fill)
  return iter(iter_dataset)


def read_all(paths: list[str]) -> list[dict[str, Any]]:
  """Every record of the given shards, deserialized, in order (for the small evaluation splits)."""
  source = grain.sources.ArrayRecordDataSource(paths)
  return [records.deserialize(source[i]) for i in range(len(source))]
