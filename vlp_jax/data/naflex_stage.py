"""The NaFlex stage's batches (SigLIP 2 §2.4.2): from a switch step on, each training batch carries NaFlex patches
in place of its square image, at a patch budget N drawn per batch from a declared set of sequence lengths.

  'image_patches'         [B, N, P*P*3] float32, normalised, zero rows past each image's own patches
  'image_spatial_shapes'  [B, 2] int32, each image's (rows, cols) patch grid, rows * cols <= N

N is a function of (seed, step) alone (`batch_sequence_length`), drawn uniformly from the set: every example of a
batch reads it from the step the pipeline tells it (pipeline.STEP_KEY), so all rows agree, and a resumed run draws
the same N for the same step. The patches are made on the host as float32 (4x the bytes of uint8 patches; the
normalisation stays beside the resize, which `naflex_patches` does in one pass).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

# The image towers (config.model.vision.type) that take NaFlex patches (models/naflex.py's NaflexImages).
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
