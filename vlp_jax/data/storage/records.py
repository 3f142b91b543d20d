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
  regions       list    optional: [{'box': [xmin, ymin, xmax, ymax] as fractions of the image width and height,
                        'text': a short description}, ...] for LocCa's location tasks (see `decode_regions`)

Files are written with `group_size:1` so that grain can read any record at random (data/storage/shard_writer.py).
"""
from __future__ import annotations

import io
import math
import os
import re
import warnings
from typing import Any, Iterable, NamedTuple

import msgpack
import numpy as np
from PIL import Image

from vlp_jax.data.storage import shard_writer

REQUIRED_FIELDS = ('image', 'caption', 'long_caption', 'label', 'source', 'key')


def encode_png(array: np.ndarray) -> bytes:
  """[H, W, 3] or [H, W] uint8 -> PNG bytes (lossless)."""
  buffer = io.BytesIO()
  Image.fromarray(np.asarray(array, np.uint8)).save(buffer, format='PNG', compress_level=1)
  return buffer.getvalue()


class BadRecordError(ValueError):
  """A record that cannot be used for training. `reason` is one of SKIP_REASONS (the metric and log name),
  `message` what is wrong with it, `key` the record's key where it could be read ('' where not)."""

  def __init__(self, reason: str, message: str, key: str = ''):
    super().__init__(f'{reason}: {message}')
    self.reason, self.message, self.key = reason, message, key


# Why a record is skipped; the order fixes the codes the pipeline carries per example (0 = a good record).
SKIP_REASONS = ('not_a_record', 'empty_image', 'corrupt_image', 'too_large', 'empty_caption',
                # webdataset samples (data/sources/webdataset_tars.py): no image member, no caption member, a tar cut
                # short
                'missing_image', 'missing_caption', 'corrupt_tar',
                # a `regions` field that is not a list of {'box': 4 fractions, 'text': str} (decode_regions)
                'bad_regions',
                # longer side more than MAX_ASPECT_RATIO times the shorter (decode_image)
                'absurd_aspect')
_OBJECT_ADDRESS = re.compile(r' ?<[^<>]* at 0x[0-9a-fA-F]+>')
# PIL's decompression-bomb threshold: beyond it decoding is refused, from the header, before any pixel is read.
DEFAULT_MAX_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485
# The longest aspect ratio (longer side / shorter) a training image may have (pipeline.LoadExamples): a centre crop of
# a wider one keeps under 5% of it, and such records (banners, separators, 6000x2 spacer images) are no image-text
# pairs. Evaluation and embedding take every image (their resize is bounded whatever the aspect ratio).
MAX_ASPECT_RATIO = 20.0


def to_rgb(image: Image.Image) -> np.ndarray:
  """A PIL image in any mode -> [H, W, 3] uint8 RGB.

  Transparency is composited on white (what a viewer shows), 16-bit and 32-bit greys are scaled to 8 bits rather than
  clipped, CMYK / YCbCr / palette / 1-bit go through PIL's own conversions.
  """
  if image.mode in ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I', 'F'):
    grey = np.asarray(image, np.float64)
    # PNG's 16-bit greys open as I;16 or I depending on the Pillow version: values above 255 mean a 16-bit range.
    scale = 1.0 if image.mode in ('I', 'F') and grey.max(initial=0) <= 255 else 255.0 / 65535.0
    grey = np.clip(np.rint(grey * scale), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1)
  if image.mode == 'P' and 'transparency' in image.info:
    image = image.convert('RGBA')
  if image.mode in ('RGBA', 'LA', 'PA', 'RGBa', 'La'):
    rgba = image.convert('RGBA')
    background = Image.new('RGBA', rgba.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(background, rgba).convert('RGB'))
  return np.asarray(image.convert('RGB'))


def decode_image(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS, max_aspect_ratio: float = math.inf
                 ) -> np.ndarray:
  """Encoded image bytes -> [H, W, 3] uint8 RGB, whatever the mode (see `to_rgb`).

  Raises BadRecordError with reason 'empty_image' (no bytes, or a zero-size image), 'too_large' (more than
  `max_pixels`, checked from the header), 'absurd_aspect' (one side more than `max_aspect_ratio` times the other,
  from the header) or 'corrupt_image' (undecodable or truncated).
  """
  if not data:
    raise BadRecordError('empty_image', 'the image has no bytes')
  try:
    with warnings.catch_warnings():  # PIL warns about large images; the size check below decides
      warnings.simplefilter('ignore', Image.DecompressionBombWarning)
      image = Image.open(io.BytesIO(data))
    with image:
      width, height = image.size
      if width * height == 0:
        raise BadRecordError('empty_image', f'the image is {width}x{height}')
      if width * height > max_pixels:
        raise BadRecordError('too_large', f'the image is {width}x{height}, more than {max_pixels} pixels')
      if max(width, height) > max_aspect_ratio * min(width, height):
        raise BadRecordError('absurd_aspect', f'the image is {width}x{height}, an aspect ratio beyond '
                             f'{max_aspect_ratio:g}:1')
      image.load()
      return to_rgb(image)
  except BadRecordError:
    raise
  except Image.DecompressionBombError as error:  # PIL refuses twice its limit before we see the size
    raise BadRecordError('too_large', str(error)) from error
  except (OSError, ValueError, SyntaxError) as error:  # what PIL raises on bad bytes
    # without the object's address PIL puts in some messages, so that a run logs the same text every time
    raise BadRecordError('corrupt_image', f'{type(error).__name__}: {_OBJECT_ADDRESS.sub("", str(error))}') from error


def decode_mask(data: bytes) -> np.ndarray:
  """PNG bytes -> [H, W] uint8 class map."""
  with Image.open(io.BytesIO(data)) as image:
    return np.asarray(image)


class Regions(NamedTuple):
  """A record's regions: boxes [R, 4] float32 (xmin, ymin, xmax, ymax) as fractions of the image width and height,
  and their descriptions, R strings."""
  boxes: np.ndarray
  texts: tuple[str, ...]


def decode_regions(regions: Any) -> Regions:
  """A record's `regions` field -> Regions (R = 0 for an empty list). Each entry is a map {'box': [xmin, ymin, xmax,
  ymax], 'text': str}, the box in [0, 1] with min <= max. Raises BadRecordError('bad_regions') naming the entry and
  what is wrong with it."""
  if not isinstance(regions, (list, tuple)):
    raise BadRecordError('bad_regions', f"'regions' must be a list of {{'box', 'text'}} maps, got "
                                        f'{type(regions).__name__}')
  boxes, texts = [], []
  for i, region in enumerate(regions):
    box = region.get('box') if isinstance(region, dict) else None
    text = region.get('text') if isinstance(region, dict) else None
    if isinstance(text, bytes):
      text = text.decode('utf-8', errors='replace')
    try:
      box = np.asarray(box, np.float64)
    except (TypeError, ValueError):
      box = np.zeros(0)
    if box.shape != (4,) or not np.all(np.isfinite(box)) or np.any((box < 0) | (box > 1)) \
        or box[0] > box[2] or box[1] > box[3]:
      raise BadRecordError('bad_regions', f"region {i}: 'box' must be [xmin, ymin, xmax, ymax] fractions of the "
                                          f'image in [0, 1] with min <= max, got {region!r:.200}')
    if not isinstance(text, str) or not text.strip():
      raise BadRecordError('bad_regions', f"region {i}: 'text' must be a non-empty description, got {region!r:.200}")
    boxes.append(box)
    texts.append(text)
  return Regions(np.asarray(boxes, np.float32).reshape(len(boxes), 4), tuple(texts))


def serialize(example: dict[str, Any]) -> bytes:
  missing = [f for f in REQUIRED_FIELDS if f not in example]
  if missing:
    raise ValueError(f'example is missing required record fields {missing}; schema: {REQUIRED_FIELDS}')
  return msgpack.packb(example, use_bin_type=True)


def deserialize(record: bytes) -> dict[str, Any]:
  """Record bytes -> the example map. Text that is not valid UTF-8 is decoded with U+FFFD replacements (and text
  written as raw bytes is decoded the same way), so a stray byte in a caption costs a character, not the record.
  Raises BadRecordError('not_a_record') when the bytes are not a schema map."""
  try:
    example = msgpack.unpackb(record, raw=False, unicode_errors='replace')
  except Exception as error:  # msgpack raises several unrelated types
    raise BadRecordError('not_a_record', f'record is not a vlp_jax msgpack example: {error}') from error
  if not isinstance(example, dict) or any(f not in example for f in REQUIRED_FIELDS):
    raise BadRecordError('not_a_record', f'record lacks the vlp_jax schema fields {REQUIRED_FIELDS}')
  for field in ('caption', 'long_caption', 'source', 'key'):
    if isinstance(example[field], bytes):
      example[field] = example[field].decode('utf-8', errors='replace')
    elif example[field] is None:
      example[field] = ''
  return example


def write_shards(examples: Iterable[dict[str, Any]], directory: str, prefix: str, num_examples: int,
                 num_shards: int) -> list[str]:
  """Write `num_examples` examples to `{prefix}-{i:05d}-of-{n:05d}.array_record` files, contiguous ranges per shard
  (data/storage/shard_writer.py: renamed into place once all are written); their paths."""
  os.makedirs(directory, exist_ok=True)
  bounds = np.linspace(0, num_examples, num_shards + 1).astype(int)
  iterator = iter(examples)
  with shard_writer.ShardWriter(directory, prefix) as writer:
    for start, stop in zip(bounds[:-1], bounds[1:]):
      writer.new_shard()  # also when the range is empty: there are always `num_shards` files
      for _ in range(start, stop):
        writer.write(serialize(next(iterator)))
  return shard_writer.publish(writer.paths, directory, prefix)
