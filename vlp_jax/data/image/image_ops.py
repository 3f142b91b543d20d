"""Image arrays as the towers take them: a model family's preprocessing (`ImagePreprocessing`: OpenAI CLIP's
shorter-side resize and centre crop, or SigLIP's square resize, and the family's mean/std), on the host (numpy) and
in the train step, with a resize whose work is bounded by the output, whatever the image's aspect ratio; and the
inverse of the normalisation for display."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
from PIL import Image

_OPENAI_MEAN, _OPENAI_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
OPENAI_MEAN, OPENAI_STD = np.array(_OPENAI_MEAN, np.float32), np.array(_OPENAI_STD, np.float32)

# How an image becomes a square model input (config.model.preprocess.resize): 'shorter_side_crop' resizes the
# shorter side to the model's size and centre-crops the longer one (OpenAI CLIP, open_clip's CLIP models,
# transformers' CLIPImageProcessor); 'squash' resizes both sides to it, changing the aspect ratio (SigLIP and
# SigLIP 2, in big_vision, open_clip and transformers).
RESIZE_MODES = ('shorter_side_crop', 'squash')
RESAMPLING = {'bicubic': Image.Resampling.BICUBIC, 'bilinear': Image.Resampling.BILINEAR}
# Where a centre crop starts when the margin is odd: 'floor' of half the margin (transformers' PIL processors, and
# vlp_jax's own runs), or half of it rounded half to even (torchvision's CenterCrop: OpenAI CLIP, open_clip).
CROP_OFFSETS = ('floor', 'round')


@dataclasses.dataclass(frozen=True)
class ImagePreprocessing:
  """How a model family's images are made into its input: the resize (`RESIZE_MODES`) with its resampling filter
  (`RESAMPLING`) and centre-crop offset (`CROP_OFFSETS`), then (x / 255 - mean) / std per channel. The weights were
  trained on it, so it is part of the model (config.model.preprocess, saved with every checkpoint)."""
  resize: str = 'shorter_side_crop'
  resample: str = 'bicubic'
  crop_offset: str = 'floor'
  mean: tuple[float, float, float] = _OPENAI_MEAN
  std: tuple[float, float, float] = _OPENAI_STD

  def config(self) -> dict:
    """As config.model.preprocess holds it."""
    return dataclasses.asdict(self)

  def resize_image(self, image: np.ndarray, size: int) -> np.ndarray:
    """[H, W, 3] uint8 -> [size, size, 3] uint8."""
    return resize_image(image, size, self.resize, self.resample, self.crop_offset)

  def resize_mask(self, mask: np.ndarray, size: int) -> np.ndarray:
    """[H, W] uint8 class map -> [size, size], the geometry of `resize_image`, by nearest neighbour."""
    return resize_mask(mask, size, self.resize, self.crop_offset)

  def normalize(self, image: np.ndarray) -> np.ndarray:
    """[..., 3] uint8 -> float32 model input."""
    return normalize_image(image, self.mean, self.std)

  def __call__(self, image: np.ndarray, size: int) -> np.ndarray:
    """[H, W, 3] uint8 -> [size, size, 3] float32 model input."""
    return self.normalize(self.resize_image(image, size))


OPENAI_CLIP_PREPROCESSING = ImagePreprocessing()
# torchvision's centre crop, as OpenAI's and open_clip's CLIP transforms run it.
TORCHVISION_CLIP_PREPROCESSING = ImagePreprocessing(crop_offset='round')
SIGLIP_PREPROCESSING = ImagePreprocessing(resize='squash', mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
# SigLIP 2's NaFlex checkpoints (transformers' Siglip2ImageProcessor): bilinear, SigLIP's mean and std; NaFlex
# preprocessing (data/image/naflex_patches.py) keeps the aspect ratio, and a fixed-size input of the same model is
# squashed.
SIGLIP2_NAFLEX_PREPROCESSING = ImagePreprocessing(resize='squash', resample='bilinear', mean=(0.5, 0.5, 0.5),
                                                  std=(0.5, 0.5, 0.5))


def check_preprocessing(preprocess: Mapping[str, Any], key: str = 'model.preprocess') -> None:
  """Raise ValueError naming config.`key`'s field unless `preprocess` describes an `ImagePreprocessing`."""
  fields = {field.name for field in dataclasses.fields(ImagePreprocessing)}
  if unknown := sorted(set(preprocess) - fields):
    raise ValueError(f'config.{key} has unknown fields {unknown}; valid fields: {sorted(fields)}')
  for field, choices in (('resize', RESIZE_MODES), ('resample', tuple(RESAMPLING)), ('crop_offset', CROP_OFFSETS)):
    if field in preprocess and preprocess[field] not in choices:
      raise ValueError(f'config.{key}.{field}={preprocess[field]!r} is not valid; valid choices: {list(choices)}')
  for field in ('mean', 'std'):
    value = preprocess.get(field, (1.0, 1.0, 1.0))
    if len(value) != 3 or (field == 'std' and min(value) <= 0):
      raise ValueError(f'config.{key}.{field}={tuple(value)!r} must be three per-channel values (RGB)'
                       + (', each > 0' if field == 'std' else ''))


def preprocessing_of(model_config: Mapping[str, Any]) -> ImagePreprocessing:
  """The `ImagePreprocessing` of a model config (config.model): its `preprocess` fields, OpenAI CLIP's for those it
  lacks (checkpoints saved before the field existed were all trained or imported with them)."""
  preprocess = model_config.get('preprocess', None) or {}
  preprocess = preprocess.to_dict() if hasattr(preprocess, 'to_dict') else dict(preprocess)  # a ConfigDict or a dict
  check_preprocessing(preprocess)
  for field in ('mean', 'std'):
    if field in preprocess:
      preprocess[field] = tuple(float(x) for x in preprocess[field])
  return ImagePreprocessing(**preprocess)


def _crop_start(margin: int, crop_offset: str) -> int:
  """Where a centre crop leaving `margin` pixels out starts (see CROP_OFFSETS)."""
  return int(round(margin / 2.0)) if crop_offset == 'round' else margin // 2


def centre_crop_geometry(height: int, width: int, size: int, crop_offset: str = 'floor'
                         ) -> tuple[int, int, int, int]:
  """The shorter-side resize and centre crop of an [height, width] image to size x size: (new_h, new_w) of the
  resized image (the longer side truncated, as torchvision's Resize and transformers compute it) and the (top, left)
  of the crop in it."""
  short = min(height, width)
  new_h, new_w = int(size * height / short), int(size * width / short)
  return new_h, new_w, _crop_start(new_h - size, crop_offset), _crop_start(new_w - size, crop_offset)


# The most pixels the shorter-side resize may make before its centre crop, as a multiple of the crop's: up to this
# aspect ratio the whole image is resized and then cropped (torchvision's and transformers' order, pixel for pixel);
# beyond it only the crop's region is resampled.
WHOLE_RESIZE_LIMIT = 4


def _resize_and_centre_crop(array: np.ndarray, size: int, resample: Image.Resampling, crop_offset: str = 'floor'
                            ) -> np.ndarray:
  """[H, W, ...] uint8 -> [size, size, ...]: the shorter side resized to `size`, then a centre crop.

  Resizing the whole image first makes size x size * aspect pixels (151 megapixels for a 6000x2 image at 224), so
  past an aspect ratio of WHOLE_RESIZE_LIMIT only the crop's region of the source is resampled (PIL's `box`, the
  same sampling positions): the work is then size x size plus the region's rows or columns, never more than the
  source or a few times the output. Pixels can differ from the whole-image resize by a few levels there, because
  PIL may take its two rounded passes (horizontal, vertical) in the other order for a region.
  """
  height, width = array.shape[:2]
  if (height, width) == (size, size):
    return array
  new_h, new_w, top, left = centre_crop_geometry(height, width, size, crop_offset)
  if (new_h, new_w) == (height, width):  # only a crop (the shorter side is `size` already)
    return array[top:top + size, left:left + size]
  image = Image.fromarray(array)
  if new_h * new_w > WHOLE_RESIZE_LIMIT * size * size:
    scale_y, scale_x = height / new_h, width / new_w  # the crop's region in source pixels
    box = (left * scale_x, top * scale_y, (left + size) * scale_x, (top + size) * scale_y)
    return np.asarray(image.resize((size, size), resample, box=box))
  return np.asarray(image.resize((new_w, new_h), resample))[top:top + size, left:left + size]


def resize_image(image: np.ndarray, size: int, resize: str = 'shorter_side_crop', resample: str = 'bicubic',
                 crop_offset: str = 'floor') -> np.ndarray:
  """[H, W, 3] uint8 -> [size, size, 3] uint8, by `resize` (RESIZE_MODES) with the `resample` filter: by default a
  bicubic resize of the shorter side, then a centre crop (OpenAI CLIP's evaluation geometry)."""
  if resize == 'squash':
    if image.shape[:2] == (size, size):
      return image
    return np.asarray(Image.fromarray(image).resize((size, size), RESAMPLING[resample]))
  return _resize_and_centre_crop(image, size, RESAMPLING[resample], crop_offset)


def resize_mask(mask: np.ndarray, size: int, resize: str = 'shorter_side_crop', crop_offset: str = 'floor'
                ) -> np.ndarray:
  """[H, W] uint8 class map -> [size, size] with `resize_image`'s geometry, by nearest neighbour so that labels are
  never blended."""
  if resize == 'squash':
    return mask if mask.shape[:2] == (size, size) else np.asarray(
        Image.fromarray(mask).resize((size, size), Image.Resampling.NEAREST))
  return _resize_and_centre_crop(mask, size, Image.Resampling.NEAREST, crop_offset)


def normalize_image(image: np.ndarray, mean: Sequence[float] = OPENAI_MEAN, std: Sequence[float] = OPENAI_STD
                    ) -> np.ndarray:
  """[..., 3] uint8 -> float32 (x / 255 - mean) / std, by default with the OpenAI CLIP mean and std: numpy on the
  host (eval sets), jax in the train step (`images_to_float`), the same formula."""
  return (image.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


def images_to_float(batch: dict[str, Any], preprocessing: ImagePreprocessing = OPENAI_CLIP_PREPROCESSING
                    ) -> dict[str, Any]:
  """The device side of the training batch contract: views emit their images as uint8 ([B, ..., H, W, 3]), which
  moves a quarter of float32's bytes from host to device and takes the normalisation (about a third of the host's
  time per 224px CLIP example, benchmarks/RESULTS.md) off the input pipeline; the train step normalises each here, with
  the model's `preprocessing` (its mean and std). Entries of other dtypes (tokens, labels, images a caller normalised
  already) pass through."""
  out = {}
  for key, value in batch.items():
    if value.dtype == np.uint8:
      if value.ndim < 3 or value.shape[-1] != 3:
        raise ValueError(f"batch['{key}'] is uint8 with shape {value.shape}: uint8 batch entries must be RGB images "
                         '[..., H, W, 3]')
      value = preprocessing.normalize(value)
    out[key] = value
  return out


def denormalize_image(image: np.ndarray, preprocessing: ImagePreprocessing = OPENAI_CLIP_PREPROCESSING
                      ) -> np.ndarray:
  """The inverse of `normalize_image` with `preprocessing`'s mean and std, for display: [..., 3] normalised float ->
  uint8 [..., 3] (rounded, clipped)."""
  std, mean = np.asarray(preprocessing.std, np.float32), np.asarray(preprocessing.mean, np.float32)
  pixels = (np.asarray(image, np.float32) * std + mean) * 255.0
  return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
