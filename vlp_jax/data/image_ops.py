"""Image arrays as the towers take them: resize and centre crop (OpenAI CLIP's evaluation geometry), the OpenAI
mean/std normalisation on the host (numpy) and in the train step, and its inverse for display."""
from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

OPENAI_MEAN = np.array((0.48145466, 0.4578275, 0.40821073), np.float32)
OPENAI_STD = np.array((0.26862954, 0.26130258, 0.27577711), np.float32)


def _resize_and_centre_crop(array: np.ndarray, size: int, resample: Image.Resampling) -> np.ndarray:
  """[H, W, ...] uint8 -> [size, size, ...]: resize so the shorter side is `size`, then a centre crop."""
  height, width = array.shape[:2]
  if (height, width) == (size, size):
    return array
  # The longer side is truncated, as torchvision's Resize (OpenAI CLIP, open_clip) and transformers compute it.
  short = min(height, width)
  new_h, new_w = int(size * height / short), int(size * width / short)
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
