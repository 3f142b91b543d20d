"""The ArrayRecord example schema shared by every dataset (embedded, converted web data, eval sets).

One record is one msgpack map:
  image         bytes   encoded image (PNG or JPEG), RGB
  caption       str     the short alt-text caption
  long_caption  str     a multi-sentence caption ('' when the source has none)
  label         int     class index, -1 when unlabelled
  source        str     name of the source the example came from
  key           str     a stable example id
  mask          bytes   optional: PNG of a per-pixel class map (0 = background, c + 1 = class c)
  canonical_caption str optional: a noise-free caption, with `hard_negatives` (list[str]) for compositionality
  teacher_embedding bytes optional: float32 vector, e.g. pre-extracted SaCo pseudo-affinity embeddings

Files are written with `group_size:1` so that grain can read any record at random.
"""
from __future__ import annotations

import io
import os
from typing import Any, Iterable

import msgpack
import numpy as np
from PIL import Image

REQUIRED_FIELDS = ('image', 'caption', 'long_caption', 'label', 'source', 'key')


def encode_png(array: np.ndarray) -> bytes:
  """[H, W, 3] or [H, W] uint8 -> PNG bytes (lossless)."""
  buffer = io.BytesIO()
  Image.fromarray(np.asarray(array, np.uint8)).save(buffer, format='PNG', compress_level=1)
  return buffer.getvalue()


def decode_image(data: bytes) -> np.ndarray:
  """Encoded image bytes -> [H, W, 3] uint8 RGB."""
  with Image.open(io.BytesIO(data)) as image:
    return np.asarray(image.convert('RGB'))


def decode_mask(data: bytes) -> np.ndarray:
  """PNG bytes -> [H, W] uint8 class map."""
  with Image.open(io.BytesIO(data)) as image:
    return np.asarray(image)


def serialize(example: dict[str, Any]) -> bytes:
  missing = [f for f in REQUIRED_FIELDS if f not in example]
  if missing:
    raise ValueError(f'example is missing required record fields {missing}; schema: {REQUIRED_FIELDS}')
  return msgpack.packb(example, use_bin_type=True)


def deserialize(record: bytes) -> dict[str, Any]:
  try:
    example = msgpack.unpackb(record, raw=False)
  except Exception as error:  # msgpack raises several unrelated types
    raise ValueError(f'record is not a vlp_jax msgpack example: {error}') from error
  if not isinstance(example, dict) or any(f not in example for f in REQUIRED_FIELDS):
    raise ValueError(f'record lacks the vlp_jax schema fields {REQUIRED_FIELDS}')
  return example


def write_shards(examples: Iterable[dict[str, Any]], directory: str, prefix: str, num_examples: int,
                 num_shards: int) -> list[str]:
  """Write `num_examples` examples to `{prefix}-{i:05d}-of-{n:05d}.array_record` files, contiguous ranges per shard."""
  from array_record.python.array_record_module import ArrayRecordWriter
  os.makedirs(directory, exist_ok=True)
  paths = [os.path.join(directory, f'{prefix}-{i:05d}-of-{num_shards:05d}.array_record') for i in range(num_shards)]
  bounds = np.linspace(0, num_examples, num_shards + 1).astype(int)
  iterator = iter(examples)
  for path, start, stop in zip(paths, bounds[:-1], bounds[1:]):
    writer = ArrayRecordWriter(path, 'group_size:1')
    for _ in range(start, stop):
      writer.write(serialize(next(iterator)))
    writer.close()
  return paths
