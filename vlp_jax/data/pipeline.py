"""The grain pipeline that every dataset goes through: ArrayRecord -> decode -> the objective's views -> batch.

Training: one global order of examples (by default one shuffle over every shard, reshuffled each epoch; with
`config.data.mixing` each global batch comes from a single source, see data/mixing.py). Views are made before the
processes split the order, and process p reads block p of every global batch, so the global batch, in the same row
order, is the same whatever the number of processes. The iterator state is a single index, saved with every
checkpoint.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

import grain
from absl import flags
import numpy as np
from PIL import Image

from vlp_jax.data import autoaugment, records, transforms
from vlp_jax.data import mixing as mixing_lib
from vlp_jax.data.teacher import load_table
from vlp_jax.data.tokenizer import default_tokenizer

OPENAI_MEAN = np.array((0.48145466, 0.4578275, 0.40821073), np.float32)
OPENAI_STD = np.array((0.26862954, 0.26130258, 0.27577711), np.float32)


def _resize_and_centre_crop(array: np.ndarray, size: int, resample: Image.Resampling) -> np.ndarray:
  """[H, W, ...] uint8 -> [size, size, ...]: resize so the shorter side is `size`, then a centre crop."""
  height, width = array.shape[:2]
  if (height, width) == (size, size):
    return array
  scale = size / min(height, width)
  new_h, new_w = max(size, round(height * scale)), max(size, round(width * scale))
  resized = np.asarray(Image.fromarray(array).resize((new_w, new_h), resample))
  top, left = (new_h - size) // 2, (new_w - size) // 2
  return resized[top:top + size, left:left + size]


def resize_image(image: np.ndarray, size: int) -> np.ndarray:
  """[H, W, 3] uint8 -> [size, size, 3] uint8: bicubic resize of the shorter side, then a centre crop."""
  return _resize_and_centre_crop(image, size, Image.Resampling.BICUBIC)


def resize_mask(mask: np.ndarray, size: int) -> np.ndarray:
  """[H, W] uint8 class map -> [size, size] with `resize_image`'s geometry, by nearest neighbour so that labels are
  never blended."""
  return _resize_and_centre_crop(mask, size, Image.Resampling.NEAREST)


def normalize_image(image: np.ndarray) -> np.ndarray:
  """[..., 3] uint8 -> float32 with the OpenAI CLIP mean and std: numpy on the host (eval sets), jax in the train
  step (`images_to_float`), the same formula."""
  return (image.astype(np.float32) / 255.0 - OPENAI_MEAN) / OPENAI_STD


def images_to_float(batch: dict[str, Any]) -> dict[str, Any]:
  """The device side of the training batch contract: views emit their images as uint8 ([B, ..., H, W, 3]), which
  moves a quarter of float32's bytes from host to device and takes the normalisation (about a third of the host's
  time per 224px CLIP example, benchmarks/RESULTS.md) off the input pipeline; the train step normalises each here, with
  `normalize_image`. Entries of other dtypes (tokens, labels, images a caller normalised already) pass through."""
  out = {}
  for key, value in batch.items():
    if value.dtype == np.uint8:
      if value.ndim < 3 or value.shape[-1] != 3:
        raise ValueError(f"batch['{key}'] is uint8 with shape {value.shape}: uint8 batch entries must be RGB images "
                         '[..., H, W, 3]')
      value = normalize_image(value)
    out[key] = value
  return out


def denormalize_image(image: np.ndarray) -> np.ndarray:
  """The inverse of `normalize_image`, for display: [..., 3] normalised float -> uint8 [..., 3] (rounded, clipped)."""
  pixels = (np.asarray(image, np.float32) * OPENAI_STD + OPENAI_MEAN) * 255.0
  return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


class DataError(RuntimeError):
  """Too many bad records: the message names the shard(s)."""


# Per-example fields the pipeline adds beside the views' own; the loop pops them before the batch goes to the devices.
STATUS_KEYS = ('record_error', 'record_shard', 'record_source')
# How many records after a bad one are tried as its substitute before the data is declared unusable.
MAX_SUBSTITUTES = 64


class ShardRecords:
  """Random access to the records of several ArrayRecord shards that also says where each came from:
  index -> (shard id, record bytes). `shard_ids[k]` is the id reported for `paths[k]`."""

  def __init__(self, paths: list[str], shard_ids: list[int] | None = None):
    from array_record.python.array_record_module import ArrayRecordReader
    self._data = grain.sources.ArrayRecordDataSource(list(paths))
    with concurrent.futures.ThreadPoolExecutor(max(1, min(16, len(paths)))) as pool:  # remote file systems
      lengths = list(pool.map(lambda p: ArrayRecordReader(p).num_records(), paths))
    self._ends = np.cumsum(lengths)
    self._shard_ids = np.asarray(range(len(paths)) if shard_ids is None else shard_ids, np.int32)

  def __len__(self) -> int:
    return len(self._data)

  def _shards(self, indices) -> np.ndarray:
    return self._shard_ids[np.searchsorted(self._ends, indices, side='right')]

  def __getitem__(self, index: int) -> tuple[int, bytes]:
    return int(self._shards(int(index))), self._data[index]

  def __getitems__(self, indices) -> list[tuple[int, bytes]]:
    return list(zip(self._shards(np.asarray(indices)).tolist(), self._data.__getitems__(indices)))


class LoadExamples(grain.MapDataset):
  """(shard id, record bytes) elements -> decoded examples (image [H, W, 3] uint8, captions as strings, and 'teacher'
  [d] float32 looked up by key when `teacher_path` is set), never failing on a bad record.

  A bad record (records.SKIP_REASONS: not a record, empty / corrupt / huge image, empty caption) at position i is
  replaced by the first good record at i + 1, i + 2, ... of the same stream, so batch shapes never change and, since
  the stream is one source's in single-source mixing, batches stay single-source. Each example carries
  'record_error' (0, or 1 + the index of the skip reason of the record at position i), 'record_shard' (the shard id
  of that record) and 'record_source' (the index of its source in `source_names`, len(source_names) for any other).
  """

  def __init__(self, parent: grain.MapDataset, shard_paths: list[str], source_names: tuple[str, ...] = (),
               caption_field: str = 'caption', teacher_path: str = ''):
    super().__init__(parent)
    self._shard_paths, self._source_names = list(shard_paths), tuple(source_names)
    self._caption_field, self._teacher_path = caption_field, teacher_path

  def __len__(self) -> int:
    return len(self._parent)

  def _load(self, record: bytes) -> dict[str, Any]:
    example = records.deserialize(record)
    if not str(example.get(self._caption_field) or '').strip():
      raise records.BadRecordError('empty_caption', f"the record's '{self._caption_field}' is empty")
    example['image'] = records.decode_image(example['image'])
    if self._teacher_path:
      example['teacher'] = load_table(self._teacher_path)[example['key']]
    return example

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    shard, record = self._parent[index]
    error = 0
    for offset in range(MAX_SUBSTITUTES + 1):
      if offset:
        _, record = self._parent[index + offset]
      try:
        example = self._load(record)
        break
      except records.BadRecordError as bad:
        error = error or 1 + records.SKIP_REASONS.index(bad.reason)
        last = bad
    else:
      raise DataError(f'{MAX_SUBSTITUTES + 1} records in a row are bad, from position {index} of the stream (in shard '
                      f'{self._shard_paths[shard]}); the last: {last}. Check the data, e.g. with '
                      'vlp_jax.data.convert, which counts the records it skips per reason.')
    source = example.get('source', '')
    example['record_error'] = np.int32(error)
    example['record_shard'] = np.int32(shard)
    example['record_source'] = np.int32(
        self._source_names.index(source) if source in self._source_names else len(self._source_names))
    return example

  def __str__(self) -> str:
    return 'LoadExamples'


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
    return example


def passthrough(example: dict[str, Any]) -> dict[str, np.ndarray]:
  """The numeric fields every view maker keeps: the label, and the teacher vector when present."""
  out = {'label': np.int32(example['label'])}
  if 'teacher' in example:
    out['teacher'] = example['teacher']
  return out


@dataclasses.dataclass
class ClipViews(grain.transforms.RandomMap):
  """A decoded example -> {'image': [S, S, 3] uint8 (normalised in the train step, `images_to_float`), 'text': [L]
  int32, 'label': []}.

  The views of CLIP and SigLIP (and the objectives built on them); SLIP and COSMOS supply their own. The image is
  resized (shorter side) and centre-cropped, as OpenAI's CLIP trains and every method evaluates, or, with
  `crop_scale` (e.g. (0.9, 1.0), open_clip's), a RandomResizedCrop; then `augment` ('randaugment', 'autoaugment',
  data/autoaugment.py) when it is not 'none'.
  """
  image_size: int
  context_length: int
  caption_field: str = 'caption'
  crop_scale: tuple[float, ...] = ()
  augment: str = 'none'

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    if self.crop_scale:
      image = transforms.random_resized_crop(example['image'], self.image_size, tuple(self.crop_scale), rng)
    else:
      image = resize_image(example['image'], self.image_size)
    if self.augment != 'none':
      image = autoaugment.get(self.augment)(image, rng)
    return {'image': image,
            'text': default_tokenizer()(example[self.caption_field], context_length=self.context_length)[0],
            **passthrough(example)}


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


def train_iterator(paths: list[str], views: grain.transforms.RandomMap, *, seed: int, global_batch_size: int,
                   process_index: int, process_count: int, teacher_path: str = '', num_workers: int = 0,
                   num_threads: int = 2, mixing: str = 'mixed', sources: list[str] | None = None,
                   source_weights: str = '', caption_field: str = 'caption') -> grain.DatasetIterator:
  """An endless iterator of process-local batches ({key: [global_batch_size / process_count, ...]}): the views'
  fields, plus the record-status fields STATUS_KEYS (see LoadExamples; `pop_status` separates them).

  The random views of example i depend only on (seed, i), and each process slices the global order after they are
  made, so the global batch is the same whatever the process count. Supports `get_state()` / `set_state()`.
  mixing: one of data/mixing.py's MODES. sources: the source of each shard; by default read from the shards'
  records. source_weights: 'name=w,...' for 'weighted' and 'single_source' mixing.
  """
  if not paths:
    raise ValueError('the training data has no shard files')
  if global_batch_size % process_count:
    raise ValueError(f'batch_size {global_batch_size} is not divisible by the process count {process_count}')
  if mixing not in mixing_lib.MODES:
    raise ValueError(f"data.mixing='{mixing}' is not valid; valid choices: {list(mixing_lib.MODES)}")
  if sources is None:  # mixed batches take shards holding several sources; the others need one source per shard
    sources = mixing_lib.shard_sources(paths, strict=mixing != 'mixed')
  names = mixing_lib.source_names(sources)

  def load(stream: grain.MapDataset) -> grain.MapDataset:
    return LoadExamples(stream, paths, names, caption_field, teacher_path)

  if mixing == 'mixed':
    dataset = load(grain.MapDataset.source(ShardRecords(paths)).shuffle(seed=seed).repeat())
  else:
    dataset = mixing_lib.mixed_sources_dataset(paths, sources, mode=mixing, seed=seed,
                                               global_batch_size=global_batch_size, weights=source_weights, load=load)
  dataset = dataset.random_map(WithStatus(views), seed=seed)
  local_batch = global_batch_size // process_count
  dataset = ProcessBlocks(dataset, local_batch, process_index, process_count)
  dataset = dataset.batch(local_batch, drop_remainder=True)
  iter_dataset = dataset.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=4))
  if num_workers > 0:
    if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; outside an absl app use their defaults
      flags.FLAGS.mark_as_parsed()
    iter_dataset = iter_dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
  return iter(iter_dataset)


def read_all(paths: list[str]) -> list[dict[str, Any]]:
  """Every record of the given shards, deserialized, in order (for the small evaluation splits)."""
  source = grain.sources.ArrayRecordDataSource(paths)
  return [records.deserialize(source[i]) for i in range(len(source))]
