"""Host-side image augmentations on [H, W, 3] uint8 numpy images (torchvision semantics), run in the data workers.

Every random function takes an `np.random.Generator` and draws from it in a fixed order, so a view depends only on
the generator's state: grain's RandomMap seeds one per (seed, example index), which makes the views reproducible and
independent of the number of workers and processes.
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image

# ITU-R 601-2 luma, as torchvision's rgb_to_grayscale.
_LUMA = np.array((0.2989, 0.587, 0.114), np.float32)


def _to_uint8(image: np.ndarray) -> np.ndarray:
  """float [..., 3] in [0, 255] -> uint8, rounded."""
  return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def _crop_box(height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float],
              rng: np.random.Generator) -> tuple[int, int, int, int]:
  """torchvision's RandomResizedCrop.get_params: (top, left, h, w) of a crop whose area is a uniform fraction in
  `scale` of the image and whose log aspect ratio (w / h) is uniform in log `ratio`; after 10 failed attempts, the
  centre crop with the aspect ratio clamped to `ratio`."""
  area = height * width
  log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
  for _ in range(10):
    target_area = area * rng.uniform(scale[0], scale[1])
    aspect = math.exp(rng.uniform(*log_ratio))
    w = int(round(math.sqrt(target_area * aspect)))
    h = int(round(math.sqrt(target_area / aspect)))
    if 0 < w <= width and 0 < h <= height:
      top = int(rng.integers(0, height - h + 1))
      left = int(rng.integers(0, width - w + 1))
      return top, left, h, w
  in_ratio = width / height
  if in_ratio < min(ratio):
    w, h = width, int(round(width / min(ratio)))
  elif in_ratio > max(ratio):
    h, w = height, int(round(height * max(ratio)))
  else:
    h, w = height, width
  return (height - h) // 2, (width - w) // 2, h, w


def random_resized_crop(image: np.ndarray, size: int, scale: tuple[float, float], rng: np.random.Generator,
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> np.ndarray:
  """[H, W, 3] uint8 -> [size, size, 3] uint8: a random crop (area fraction in `scale`, aspect ratio in `ratio`),
  bicubically resized to size x size."""
  top, left, h, w = _crop_box(image.shape[0], image.shape[1], scale, ratio, rng)
  crop = np.ascontiguousarray(image[top:top + h, left:left + w])
  if (h, w) == (size, size):
    return crop
  return np.asarray(Image.fromarray(crop).resize((size, size), Image.Resampling.BICUBIC))


def _grayscale(image: np.ndarray) -> np.ndarray:
  """float [H, W, 3] -> float [H, W, 1] luma."""
  return image @ _LUMA[:, None]


def _blend(image: np.ndarray, other: np.ndarray | float, factor: float) -> np.ndarray:
  """torchvision's _blend: factor * image + (1 - factor) * other, clipped to [0, 255]."""
  return np.clip(factor * image + (1.0 - factor) * other, 0.0, 255.0)


def _planes(image: np.ndarray) -> np.ndarray:
  """[..., 3] -> [3, ...] contiguous: elementwise work on channel planes is ~3x faster than on strided channels, and
  reductions over a last axis of 3 ~25x slower than elementwise maxima. Colour jitter runs on every crop of every
  SLIP and COSMOS view, so this matters."""
  return np.ascontiguousarray(np.moveaxis(image, -1, 0))


def _fraction(x: np.ndarray) -> np.ndarray:
  """x mod 1 (faster than numpy's float %)."""
  return x - np.floor(x)


def _rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
  """float [..., 3] in [0, 1] -> HSV in [0, 1] (hue as a fraction of a turn), as colorsys does per pixel."""
  r, g, b = _planes(rgb)
  maxc = np.maximum(np.maximum(r, g), b)
  delta = maxc - np.minimum(np.minimum(r, g), b)
  s = delta / np.maximum(maxc, 1e-12)
  inv = 1.0 / np.maximum(delta, 1e-12)
  h = np.where(maxc == r, (g - b) * inv, np.where(maxc == g, 2.0 + (b - r) * inv, 4.0 + (r - g) * inv))
  h = np.where(delta > 0, _fraction(h / 6.0), 0.0)
  return np.stack([h, s, maxc], axis=-1).astype(rgb.dtype)


def _hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
  """Inverse of `_rgb_to_hsv`: channel n of (R, G, B) is v (1 - s clip(min(k, 4 - k), 0, 1)) with
  k = (n' + 6 h) mod 6 and n' = 5, 3, 1."""
  h, s, v = _planes(hsv)
  h6 = 6.0 * h
  channels = []
  for offset in (5.0, 3.0, 1.0):
    k = h6 + offset
    k -= 6.0 * np.floor(k / 6.0)
    channels.append(v * (1.0 - s * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)))
  return np.stack(channels, axis=-1)


def _adjust_hue(image: np.ndarray, hue_factor: float) -> np.ndarray:
  """float [H, W, 3] in [0, 255]: rotate the hue by `hue_factor` of a turn."""
  hsv = _rgb_to_hsv(image / 255.0)
  hsv[..., 0] = _fraction(hsv[..., 0] + hue_factor)
  return _hsv_to_rgb(hsv) * 255.0


def color_jitter(image: np.ndarray, rng: np.random.Generator, brightness: float = 0.4, contrast: float = 0.4,
                 saturation: float = 0.4, hue: float = 0.1) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8, torchvision's ColorJitter: the four adjustments in a random order, with factors
  uniform in [max(0, 1 - x), 1 + x] (brightness, contrast, saturation) and [-hue, hue] (a fraction of a turn).
  A strength of 0 leaves that adjustment out."""
  order = rng.permutation(4)
  factors = [rng.uniform(max(0.0, 1.0 - x), 1.0 + x) if x > 0 else None for x in (brightness, contrast, saturation)]
  factors.append(rng.uniform(-hue, hue) if hue > 0 else None)
  out = image.astype(np.float32)
  for op in order:
    factor = factors[op]
    if factor is None:
      continue
    if op == 0:  # brightness: blend with black
      out = _blend(out, 0.0, factor)
    elif op == 1:  # contrast: blend with the mean grey level of the image
      out = _blend(out, float(_grayscale(out).mean()), factor)
    elif op == 2:  # saturation: blend with the image's own greyscale
      out = _blend(out, _grayscale(out), factor)
    else:
      out = _adjust_hue(out, factor)
  return _to_uint8(out)


def check_color_options(jitter_key: str, jitter: tuple, grayscale_key: str, grayscale_p: float) -> None:
  """Raise ValueError naming the config key unless `jitter` is (brightness, contrast, saturation, hue), each >= 0
  with hue <= 0.5 (a half turn), and `grayscale_p` is a probability."""
  jitter = tuple(jitter)
  if len(jitter) != 4 or min(jitter) < 0 or jitter[3] > 0.5:
    raise ValueError(f'{jitter_key}={jitter!r} must be (brightness, contrast, saturation, hue), each >= 0, with '
                     'hue <= 0.5')
  if not 0 <= grayscale_p <= 1:
    raise ValueError(f'{grayscale_key}={grayscale_p!r} must be in [0, 1]')


def random_grayscale(image: np.ndarray, rng: np.random.Generator, p: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: with probability p, the luma replicated over the three channels."""
  if rng.random() >= p:
    return image
  return np.repeat(_to_uint8(_grayscale(image.astype(np.float32))), 3, axis=-1)


def _kernel_size(side: int) -> int:
  """SimCLR's blur kernel: 10% of the image side, made odd (23 for 224), at least 3."""
  size = int(0.1 * side)
  return max(3, size + 1 - size % 2)


def _blur_1d(image: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
  """Convolve float32 [H, W, C] with a symmetric odd kernel along `axis` (0 or 1), reflect-padded (as
  torchvision)."""
  radius = len(weights) // 2
  pad = [(0, 0)] * image.ndim
  pad[axis] = (radius, radius)
  padded = np.pad(image, pad, mode='reflect')
  length = image.shape[axis]
  out = np.zeros_like(image)
  for j, w in enumerate(weights):
    out += w * (padded[j:j + length] if axis == 0 else padded[:, j:j + length])
  return out


def gaussian_blur(image: np.ndarray, rng: np.random.Generator, sigma: tuple[float, float] = (0.1, 2.0),
                  p: float = 0.5) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: with probability p, a Gaussian blur with sigma uniform in `sigma` (pixels) and a
  kernel of about 10% of the shorter side (odd), separable and reflect-padded."""
  if rng.random() >= p:
    return image
  std = rng.uniform(sigma[0], sigma[1])
  size = min(_kernel_size(min(image.shape[:2])), 2 * (min(image.shape[:2]) - 1) + 1)  # reflect pad < side
  x = np.arange(size, dtype=np.float32) - size // 2
  weights = np.exp(-x**2 / (2.0 * std**2)).astype(np.float32)
  weights /= weights.sum()
  out = _blur_1d(_blur_1d(image.astype(np.float32), weights, 0), weights, 1)
  return _to_uint8(out)


def solarize(image: np.ndarray, rng: np.random.Generator, p: float, threshold: int = 128) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: with probability p, pixels >= threshold inverted (255 - x), the rest unchanged."""
  if rng.random() >= p:
    return image
  return np.where(image >= threshold, 255 - image, image).astype(np.uint8)


def horizontal_flip(image: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
  """[H, W, 3] -> the same image, mirrored left-right with probability p."""
  if rng.random() >= p:
    return image
  return np.ascontiguousarray(image[:, ::-1])


def dino_augment(crop: np.ndarray, rng: np.random.Generator, jitter: tuple[float, float, float, float],
                 grayscale_prob: float, blur_p: float, solarize_p: float) -> np.ndarray:
  """DINO's augmentation of one crop [s, s, 3] uint8: flip, colour jitter (p 0.8; brightness, contrast, saturation,
  hue), grayscale, blur (p `blur_p`), solarisation (p `solarize_p`), drawn in that order from `rng` (COSMOS's crops,
  SigLIP 2's self-distillation views, `dino_global_view`)."""
  crop = horizontal_flip(crop, rng)
  if rng.random() < 0.8:
    brightness, contrast, saturation, hue = jitter
    crop = color_jitter(crop, rng, brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)
  crop = random_grayscale(crop, rng, p=grayscale_prob)
  crop = gaussian_blur(crop, rng, p=blur_p)
  return solarize(crop, rng, p=solarize_p)


def dino_view_draws(height: int, width: int, scale: tuple[float, float], rng: np.random.Generator,
                    jitter: tuple[float, float, float, float], grayscale_prob: float, blur_p: float,
                    solarize_p: float) -> None:
  """Advances `rng` exactly as `dino_augment(random_resized_crop(image, size, scale, rng), rng, jitter, ...)` does
  for an image of height x width (any size), without making the view: the same calls with the same bounds, in the
  same order (a bounded integer or a permutation can take more than one value of the stream). For views built only
  part of a run (SigLIP 2's), so that draws after them stay what they are when they are built.
  tests/unit/data/test_view_draws.py pins it to the two functions."""
  _crop_box(height, width, scale, (3 / 4, 4 / 3), rng)
  rng.random()  # horizontal_flip
  if rng.random() < 0.8:  # color_jitter
    rng.permutation(4)
    for x in jitter[:3]:
      if x > 0:
        rng.uniform(max(0.0, 1.0 - x), 1.0 + x)
    if jitter[3] > 0:
      rng.uniform(-jitter[3], jitter[3])
  rng.random()  # random_grayscale
  if rng.random() < blur_p:  # gaussian_blur's sigma
    rng.uniform(0.1, 2.0)
  rng.random()  # solarize
  del grayscale_prob, solarize_p  # their draws are made whatever the probability


# DINO's two global views differ in their blur and solarisation probabilities: (blur_p, solarize_p) of each.
DINO_GLOBAL_VIEWS = ((1.0, 0.0), (0.1, 0.2))


def dino_global_view(image: np.ndarray, rng: np.random.Generator,
                     jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.2, 0.1),
                     grayscale_p: float = 0.2) -> np.ndarray:
  """[H, W, 3] uint8 -> the same shape: the augmentation of one of DINO's two global views (`DINO_GLOBAL_VIEWS`),
  each with probability 1/2, so that one view per example meets the augmentations COSMOS's two global views meet,
  in the same proportions (config.data.augment='dino': the image augmentation of COSMOS's CLIP baseline). The crop
  is not part of it (config.data.crop_scale)."""
  blur_p, solarize_p = DINO_GLOBAL_VIEWS[int(rng.integers(len(DINO_GLOBAL_VIEWS)))]
  return dino_augment(image, rng, jitter, grayscale_p, blur_p, solarize_p)


def noisy_gradient(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
  """-> [height, width, 3] float: a vertical gradient between two uniform random colours plus Gaussian pixel noise
  (sd 18), unclipped. The embedded web scenes' background (data/sources/synthetic_shapes.py) and
  `random_background`'s."""
  top, bottom = rng.integers(0, 256, size=(2, 3))
  ramp = np.linspace(0, 1, height)[:, None, None]
  return top * (1 - ramp) + bottom * ramp + rng.normal(0, 18, (height, width, 3))


def replace_background(image: np.ndarray, mask: np.ndarray, background: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 image, its [H, W] class map (0 = background) and an [H, W, 3] uint8 background -> the objects
  of the image on that background. Pixels on an object's anti-aliased edge are in the mask and keep their blend."""
  if mask.shape != image.shape[:2]:
    raise ValueError(f'the mask is {mask.shape[0]}x{mask.shape[1]} but the image is {image.shape[0]}x'
                     f'{image.shape[1]}; replacing the background needs a class map of the image size')
  return np.where(mask[..., None] > 0, image, background)


def random_background(image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """[H, W, 3] uint8 image and its [H, W] class map (0 = background) -> the image on a fresh `noisy_gradient`. Two
  calls share nothing about the original background, so views made after it cannot be matched by their
  backgrounds."""
  return replace_background(image, mask, _to_uint8(noisy_gradient(*image.shape[:2], rng)))


def simclr_view(image: np.ndarray, size: int, rng: np.random.Generator,
                crop_scale: tuple[float, float] = (0.08, 1.0),
                jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1),
                grayscale_p: float = 0.2) -> np.ndarray:
  """[H, W, 3] uint8 -> [size, size, 3] uint8: the SimCLR view of SLIP (docs/methods.md §2), in SLIP's order:
  RandomResizedCrop(scale `crop_scale`), ColorJitter(*`jitter`) (brightness, contrast, saturation, hue) with p 0.8,
  grayscale with p `grayscale_p`, Gaussian blur (sigma in [0.1, 2]) with p 0.5, horizontal flip with p 0.5. The
  defaults are SLIP's; a hue of 0 and no grayscale keep the colours, for data whose classes are colours."""
  image = random_resized_crop(image, size, tuple(crop_scale), rng)
  if rng.random() < 0.8:
    brightness, contrast, saturation, hue = jitter
    image = color_jitter(image, rng, brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)
  image = random_grayscale(image, rng, p=grayscale_p)
  image = gaussian_blur(image, rng, sigma=(0.1, 2.0), p=0.5)
  return horizontal_flip(image, rng, p=0.5)
