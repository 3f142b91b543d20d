"""The NaFlex stage's batches (SigLIP 2 §2.4.2): from a switch step on, each training batch carries NaFlex patches
in place of its square image, at a patch budget N drawn per batch from a declared set of sequence lengths.

  'image_patches'         [B, N, P*P*3] uint8 pixels, zero rows past each image's own patches
  'image_spatial_shapes'  [B, 2] int32, each image's (rows, cols) patch grid, rows * cols <= N

N is a function of (seed, step) alone (`batch_sequence_length`), drawn uniformly from the set: every example of a
batch reads it from the step the pipeline tells it (pipeline.STEP_KEY), so all rows agree, and a resumed run draws
the same N for the same step. The patches travel as uint8 (`naflex_pixels`: data/image/naflex_patches.py's grid, resize
and patch order, not normalised), a quarter of float32's bytes from the data workers to the devices, as square images
do; the train step normalises them (objectives/siglip2.py), to what `naflex_patches` gives.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from vlp_jax.data.image.image_ops import RESAMPLING, ImagePreprocessing
from vlp_jax.data.image.naflex_patches import naflex_grid

# The image towers (config.model.vision.type) that take NaFlex patches (models/naflex_inputs.py's NaflexImages).
NAFLEX_TOWERS = ('siglip_vit',)
PATCHES, SPATIAL_SHAPES = 'image_patches', 'image_spatial_shapes'  # the batch keys in place of 'image'
# Mixed into the draw's seed so that it is independent of every other stream drawn from config.seed.
_DRAW_TAG = 0x6E61666C  # 'nafl'


def batch_sequence_length(seed: int, step: int, sequence_lengths: Sequence[int]) -> int:
  """The patch budget of train step `step`'s batch: one of `sequence_lengths`, uniformly, from (seed, step) alone."""
  index = np.random.default_rng([int(seed), int(step), _DRAW_TAG]).integers(len(sequence_lengths))
  return int(sequence_lengths[index])


def check_sequence_lengths(key: str, sequence_lengths: Sequence[int]) -> None:
  """ValueError naming `key` unless `sequence_lengths` is a non-empty tuple of distinct positive integers."""
  values = tuple(sequence_lengths) if isinstance(sequence_lengths, (tuple, list)) else None
  if (not values or len(set(values)) != len(values)
      or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values)):
    raise ValueError(f'config.{key}={sequence_lengths!r} must be a non-empty tuple of distinct positive integers '
                     '(patch budgets, e.g. (128, 256, 576, 784, 1024) as SigLIP 2)')


def is_naflex_batch(batch: dict) -> bool:
  """Whether a batch carries NaFlex patches (PATCHES) rather than square images."""
  return PATCHES in batch


def naflex_pixels(image: np.ndarray, patch_size: int, max_patches: int, preprocessing: ImagePreprocessing
                  ) -> tuple[np.ndarray, np.ndarray]:
  """image [H, W, 3] uint8 -> (patches [max_patches, P*P*3] uint8, spatial_shape [2] int32): `naflex_patches`
  before its normalisation (the same grid, resize filter and patch order), zero rows past rows * cols."""
  rows, cols = naflex_grid(image.shape[0], image.shape[1], patch_size, max_patches)
  size = (cols * patch_size, rows * patch_size)  # PIL's (width, height)
  if image.shape[:2] != size[::-1]:
    image = np.asarray(Image.fromarray(image).resize(size, RESAMPLING[preprocessing.resample]))
  patches = image.reshape(rows, patch_size, cols, patch_size, 3).transpose(0, 2, 1, 3, 4)
  padded = np.zeros((max_patches, patch_size * patch_size * 3), np.uint8)
  padded[:rows * cols] = patches.reshape(rows * cols, -1)
  return padded, np.array([rows, cols], np.int32)
