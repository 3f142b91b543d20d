"""The grain pipeline that every dataset goes through: ArrayRecord -> decode -> preprocess -> tokenize -> batch.

Training: one global shuffled order (reshuffled each epoch), each process reads its strided slice of it, so the
global batch is the same whatever the number of processes. The iterator state is a single index, saved with
every checkpoint.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import grain
from absl import flags
import numpy as np
from PIL import Image

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
class DecodeExample(grain.transforms.Map):
  """A serialized record -> {'image': [S, S, 3] float32, 'text': [L] int32, 'label': [] int32}, plus
  'teacher': [d] float32 looked up by the example's key when `teacher_path` is set."""
  image_size: int
  context_length: int
  caption_field: str = 'caption'
  teacher_path: str = ''

  def map(self, record: bytes) -> dict[str, np.ndarray]:
    example = records.deserialize(record)
    image = normalize_image(resize_image(records.decode_image(example['image']), self.image_size))
    text = default_tokenizer()(example[self.caption_field], context_length=self.context_length)[0]
    out = {'image': image, 'text': text, 'label': np.int32(example['label'])}
    if self.teacher_path:
      out['teacher'] = load_table(self.teacher_path)[example['key']]
    return out


def train_iterator(paths: list[str], transform: grain.transforms.Map, *, seed: int, global_batch_size: int,
                   process_index: int, process_count: int, num_workers: int = 0,
                   num_threads: int = 2) -> grain.DatasetIterator:
  """An endless iterator of process-local batches ({key: [global_batch_size / process_count, ...]}).

  Supports `get_state()` / `set_state()` for exact resumption.
  """
  if not paths:
    raise ValueError('the training data has no shard files')
  if global_batch_size % process_count:
    raise ValueError(f'batch_size {global_batch_size} is not divisible by the process count {process_count}')
  dataset = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths)).shuffle(seed=seed).repeat()
  dataset = dataset[process_index::process_count].map(transform)
  dataset = dataset.batch(global_batch_size // process_count, drop_remainder=True)
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
