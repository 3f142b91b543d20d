"""NaFlex preprocessing on the host (SigLIP 2's aspect-preserving, variable-length images): each image resized to
the patch grid that keeps its aspect ratio best within a patch budget, normalised with the model's preprocessing,
cut into flattened patches and padded with zero rows to the budget. The tower takes the result as
`vlp_jax.models.naflex.NaflexImages` (patches stacked [B, N, P*P*3], spatial shapes [B, 2]).

The grid rule and the patch order are transformers' Siglip2ImageProcessor's, so that its checkpoints see the inputs
they were made for: the largest scale (found by bisection, as transformers does) at which both sides, rounded up to
whole patches (at least one), make at most `max_patches` patches; patches row by row, each flattened as (patch row,
patch column, channel).
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image

from vlp_jax.data.image.image_ops import RESAMPLING, ImagePreprocessing

# The bisection of transformers' get_image_size_for_max_num_patches: the scale searched in [_LOW, _HIGH] until the
# interval is narrower than _TOLERANCE. The grid is a step function of the scale, so these constants decide which
# grid a borderline image gets: they are kept as transformers has them.
_TOLERANCE = 1e-5
_LOW, _HIGH = _TOLERANCE / 10, 100.0


def _side_in_pixels(side: int, scale: float, patch_size: int) -> int:
  """One side of the image scaled by `scale`, rounded up to whole patches, at least one patch (in pixels)."""
  return max(patch_size, math.ceil(side * scale / patch_size) * patch_size)


def naflex_grid(height: int, width: int, patch_size: int, max_patches: int) -> tuple[int, int]:
  """The (rows, cols) patch grid an image of height x width pixels is resized to: rows * cols <= max_patches (for
  any budget of at least one patch), close to the image's aspect ratio."""
  if height < 1 or width < 1 or patch_size < 1 or max_patches < 1:
    raise ValueError(f'naflex_grid needs a non-empty image, a positive patch size and patch budget; got '
                     f'{height}x{width} pixels, patch_size={patch_size}, max_patches={max_patches}')
  low, high = _LOW, _HIGH
  while high - low >= _TOLERANCE:
    scale = (low + high) / 2
    rows = _side_in_pixels(height, scale, patch_size) / patch_size
    cols = _side_in_pixels(width, scale, patch_size) / patch_size
    if rows * cols <= max_patches:
      low = scale
    else:
      high = scale
  return (_side_in_pixels(height, low, patch_size) // patch_size,
          _side_in_pixels(width, low, patch_size) // patch_size)


def naflex_patches(image: np.ndarray, patch_size: int, max_patches: int, preprocessing: ImagePreprocessing
                   ) -> tuple[np.ndarray, np.ndarray]:
  """image: [H, W, 3] uint8 -> (patches [max_patches, P*P*3] float32, spatial_shape [2] int32 (rows, cols)).

  The image is resized to (rows * P, cols * P) pixels (`naflex_grid`) with `preprocessing.resample`, normalised
  with its mean and std (its `resize` mode, a square model input's, does not apply), cut into rows * cols patches
  row by row, and padded with zero rows up to `max_patches`.
  """
  image = np.asarray(image)
  if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
    raise ValueError(f'naflex_patches takes one RGB image, uint8 [H, W, 3]; got {image.dtype} {image.shape}')
  rows, cols = naflex_grid(image.shape[0], image.shape[1], patch_size, max_patches)
  size = (cols * patch_size, rows * patch_size)  # PIL's (width, height)
  if image.shape[:2] != size[::-1]:
    image = np.asarray(Image.fromarray(image).resize(size, RESAMPLING[preprocessing.resample]))
  pixels = preprocessing.normalize(image)
  patches = pixels.reshape(rows, patch_size, cols, patch_size, 3).transpose(0, 2, 1, 3, 4)
  padded = np.zeros((max_patches, patch_size * patch_size * 3), np.float32)
  padded[:rows * cols] = patches.reshape(rows * cols, -1)
  return padded, np.array([rows, cols], np.int32)
