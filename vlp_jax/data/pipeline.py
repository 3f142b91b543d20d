"""The grain pipeline that every dataset goes through: ArrayRecord -> decode -> the objective's views -> batch.

Training: one global order of examples (by default one shuffle over every shard, reshuffled each epoch; with
`config.data.mixing` each global batch comes from a single source, see data/mixing.py). Views are made before the
processes split the order, and process p reads block p of every global batch, so the global batch, in the same row
order, is the same whatever the number of processes. The iterator state is a single index, saved with every
checkpoint.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import grain
from absl import flags
import numpy as np
from PIL import Image

from vlp_jax.data import mixing as mixing_lib
from vlp_jax.data import records
from vlp_jax.data.teacher import load_table
from vlp_jax.data.tokenizer import default_tokenizer

OPENAI_MEAN = np.array((0.48145466, 0.4578275, 0.40821073), np.float32)
OPENAI_STD = np.array((0.26862954, 0.26130258, 0.27577711), np.float32)


def resize_image(image: np.ndarray, size: int) -> np.ndarray:
  """[H, W, 3] uint8 -> [size, size, 3] uint8: bicubic resize of the shorter side, then a centre crop."""
  height, width = image.shape[:2]
  if (height, width) == (size, size):
    return image
  scale = size / min(height, width)
  new_h, new_w = max(size, round(height * scale)), max(size, round(width * scale))
  resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BICUBIC))
  top, left = (new_h - size) // 2, (new_w - size) // 2
  return resized[top:top + size, left:left + size]


def normalize_image(image: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 -> float32 with the OpenAI CLIP mean and std."""
  return (image.astype(np.float32) / 255.0 - OPENAI_MEAN) / OPENAI_STD


@dataclasses.dataclass
class DecodeRecord(grain.transforms.Map):
  """A serialized record -> the example with its image decoded ([H, W, 3] uint8), and 'teacher' ([d] float32,
  looked up by the example's key) when `teacher_path` is set. Captions stay strings for the views to use."""
  teacher_path: str = ''

  def map(self, record: bytes) -> dict[str, Any]:
    example = records.deserialize(record)
    example['image'] = records.decode_image(example['image'])
    if self.teacher_path:
      example['teacher'] = load_table(self.teacher_path)[example['key']]
    return example


def passthrough(example: dict[str, Any]) -> dict[str, np.ndarray]:
  """The numeric fields every view maker keeps: the label, and the teacher vector when present."""
  out = {'label': np.int32(example['label'])}
  if 'teacher' in example:
    out['teacher'] = example['teacher']
  return out


@dataclasses.dataclass
class ClipViews(grain.transforms.RandomMap):
  """A decoded example -> {'image': [S, S, 3] float32 (resized, normalised), 'text': [L] int32, 'label': []}.

  The views of CLIP and SigLIP; other objectives supply their own (multi-crop, SSL views, text augmentation).
  """
  image_size: int
  context_length: int
  caption_field: str = 'caption'

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    del rng  # deterministic views
    return {'image': normalize_image(resize_image(example['image'], self.image_size)),
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
                   num_threads: int = 2, mixing: str = 'mixed', sources: list[str] | None = None
                   ) -> grain.DatasetIterator:
  """An endless iterator of process-local batches ({key: [global_batch_size / process_count, ...]}).

  The random views of example i depend only on (seed, i), and each process slices the global order after they are
  made, so the global batch is the same whatever the process count. Supports `get_state()` / `set_state()`.
  mixing: 'mixed' (one shuffled order over every shard), 'single_source' or 'sequential' (each global batch from
  one source; see data/mixing.py). sources: the source of each shard for the latter two; by default read from the
  shards' records.
  """
  if not paths:
    raise ValueError('the training data has no shard files')
  if global_batch_size % process_count:
    raise ValueError(f'batch_size {global_batch_size} is not divisible by the process count {process_count}')
  if mixing not in mixing_lib.MODES:
    raise ValueError(f"data.mixing='{mixing}' is not valid; valid choices: {list(mixing_lib.MODES)}")
  if mixing == 'mixed':
    dataset = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths)).shuffle(seed=seed).repeat()
  else:
    dataset = mixing_lib.single_source_dataset(
        paths, mixing_lib.shard_sources(paths) if sources is None else sources, mode=mixing, seed=seed,
        global_batch_size=global_batch_size)
  dataset = dataset.map(DecodeRecord(teacher_path)).random_map(views, seed=seed)
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
