"""Multi-crop augmentation in the train step (config.data.augment_on='device'): the host decodes each example once to
one fixed-size uint8 image and draws every view's parameters from the example's generator; the crops, resizes and
colour augmentations run inside the jitted step.

Host side (numpy, in the data workers): `source_image` squashes the decoded image to the config's
`data.device_source_size`, and `dino_view_params` / `simclr_view_params` make one view's parameter row
([VIEW_PARAMS] float32) with exactly the draws, in exactly the order, of transforms.dino_augment / simclr_view on a
RandomResizedCrop: for the same generator state the device view has the host view's crop box, flip and colour
factors, and draws made after the views (text crops) stay what they are in host mode.

Device side (jax, in the step): `render_batch` replaces SOURCE_KEY and each `<view>` + PARAMS_SUFFIX entry by the
views, [..., size, size, 3] uint8, which `image_ops.images_to_float` then normalises as any host view.

How the device views differ from the host's (tests/unit/data/test_device_augment.py measures it): the crop box is
drawn in the decoded image's pixels and mapped onto the squashed source, so the crop's area and aspect ratio
follow the host's distribution exactly, but the pixels are resampled twice (decoded -> source on the host, bicubic;
source -> view here, jax's Keys cubic with antialiasing, a = -0.5 as PIL's, without PIL's rounding between its two
passes), and a crop finer than the source's pixels is upsampled from it. The colour operations are torchvision's
(as transforms.py), in float32, rounded where the host rounds.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from vlp_jax.data.image import transforms

# Where config.data.augment_on puts the objectives' multi-crop augmentation.
AUGMENT_ON = ('host', 'device')
SOURCE_KEY = 'view_source'  # [B, S, S, 3] uint8: each example's decoded image, squashed to S x S
PARAMS_SUFFIX = '_params'  # batch[<view key> + PARAMS_SUFFIX]: [B, ..., VIEW_PARAMS] float32, one row per view

# One view's parameter row: the crop box as fractions of the decoded image (top, left, height, width), flip, colour
# jitter applied, the order of its four adjustments (brightness, contrast, saturation, hue as 0..3), their factors,
# grayscale, blur applied, the blur's sigma in pixels of the view, solarise.
FIELDS = ('top', 'left', 'height', 'width', 'flip', 'jitter', 'order0', 'order1', 'order2', 'order3', 'brightness',
          'contrast', 'saturation', 'hue', 'grayscale', 'blur', 'sigma', 'solarize')
VIEW_PARAMS = len(FIELDS)
_F = {name: i for i, name in enumerate(FIELDS)}
_RATIO = (3 / 4, 4 / 3)  # RandomResizedCrop's aspect-ratio range, as transforms.random_resized_crop
_LUMA = (0.2989, 0.587, 0.114)  # as transforms._LUMA


def source_image(image: np.ndarray, size: int) -> np.ndarray:
  """[H, W, 3] uint8 -> [size, size, 3] uint8, resized bicubically to a square (the aspect ratio is restored by the
  crop boxes, which are fractions of the decoded image)."""
  if image.shape[:2] == (size, size):
    return image
  return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BICUBIC))


def _crop_fractions(height: int, width: int, scale: tuple[float, float], rng: np.random.Generator) -> list[float]:
  """random_resized_crop's box, drawn as it draws it, as fractions (top, left, h, w) of the image."""
  top, left, h, w = transforms._crop_box(height, width, scale, _RATIO, rng)  # pylint: disable=protected-access
  return [top / height, left / width, h / height, w / width]


def _jitter_params(rng: np.random.Generator, jitter: tuple[float, float, float, float]) -> list[float]:
  """[applied, order x 4, brightness, contrast, saturation, hue] drawn as `transforms.color_jitter` behind its
  p 0.8 draws; an adjustment of strength 0 gets the identity factor (1, or a hue of 0)."""
  if rng.random() >= 0.8:
    return [0.0, 0, 1, 2, 3, 1.0, 1.0, 1.0, 0.0]
  order = rng.permutation(4)
  factors = [rng.uniform(max(0.0, 1.0 - x), 1.0 + x) if x > 0 else 1.0 for x in jitter[:3]]
  hue = rng.uniform(-jitter[3], jitter[3]) if jitter[3] > 0 else 0.0
  return [1.0, *order, *factors, hue]


def _blur_params(rng: np.random.Generator, p: float) -> list[float]:
  """[applied, sigma] drawn as `transforms.gaussian_blur`."""
  if rng.random() >= p:
    return [0.0, 1.0]
  return [1.0, rng.uniform(0.1, 2.0)]


def dino_view_params(height: int, width: int, scale: tuple[float, float], rng: np.random.Generator,
                     jitter: tuple[float, float, float, float], grayscale_p: float, blur_p: float,
                     solarize_p: float) -> np.ndarray:
  """-> [VIEW_PARAMS] float32: the parameters of
  `transforms.dino_augment(random_resized_crop(image, size, scale, rng), rng, jitter, grayscale_p, blur_p,
  solarize_p)` for an image of height x width, drawn from `rng` as those calls draw them."""
  box = _crop_fractions(height, width, scale, rng)
  flip = float(rng.random() < 0.5)
  colour = _jitter_params(rng, jitter)
  gray = float(rng.random() < grayscale_p)
  blur = _blur_params(rng, blur_p)
  solar = float(rng.random() < solarize_p)
  return np.array([*box, flip, *colour, gray, *blur, solar], np.float32)


def simclr_view_params(height: int, width: int, rng: np.random.Generator, crop_scale: tuple[float, float],
                       jitter: tuple[float, float, float, float], grayscale_p: float) -> np.ndarray:
  """-> [VIEW_PARAMS] float32: the parameters of `transforms.simclr_view(image, size, rng, crop_scale, jitter,
  grayscale_p)` (crop, jitter p 0.8, grayscale, blur p 0.5, flip p 0.5: the flip commutes with the colour and the
  symmetric, reflect-padded blur, so the device applies it second), drawn as it draws them."""
  box = _crop_fractions(height, width, crop_scale, rng)
  colour = _jitter_params(rng, jitter)
  gray = float(rng.random() < grayscale_p)
  blur = _blur_params(rng, 0.5)
  flip = float(rng.random() < 0.5)
  return np.array([*box, flip, *colour, gray, *blur, 0.0], np.float32)


# [VIEW_PARAMS] float32: the whole image, resized, nothing else (for views that are not made yet, whose render must
# still be finite: SigLIP 2's before its switch).
WHOLE_IMAGE = np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0, 1, 2, 3, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0], np.float32)


def crop_params(height: int, width: int, scale: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
  """-> [VIEW_PARAMS] float32: `transforms.random_resized_crop` alone (no flip, no colour), drawn as it draws."""
  return np.concatenate([np.asarray(_crop_fractions(height, width, scale, rng), np.float32), WHOLE_IMAGE[4:]])


# ---- device side ----

def _round(x: jax.Array) -> jax.Array:
  """float in [0, 255] as the host's uint8 rounding leaves it (float, so that the ops stay float)."""
  return jnp.clip(jnp.round(x), 0.0, 255.0)


def _gray(x: jax.Array) -> jax.Array:
  """[H, W, 3] -> [H, W, 1] luma."""
  return x @ jnp.asarray(_LUMA, x.dtype)[:, None]


def _blend(x: jax.Array, other: jax.Array, factor: jax.Array) -> jax.Array:
  return jnp.clip(factor * x + (1.0 - factor) * other, 0.0, 255.0)


def _hue(x: jax.Array, factor: jax.Array) -> jax.Array:
  """Rotate the hue of [H, W, 3] in [0, 255] by `factor` of a turn (transforms._adjust_hue's HSV round trip)."""
  rgb = x / 255.0
  r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
  maxc = jnp.maximum(jnp.maximum(r, g), b)
  delta = maxc - jnp.minimum(jnp.minimum(r, g), b)
  s = delta / jnp.maximum(maxc, 1e-12)
  inv = 1.0 / jnp.maximum(delta, 1e-12)
  h = jnp.where(maxc == r, (g - b) * inv, jnp.where(maxc == g, 2.0 + (b - r) * inv, 4.0 + (r - g) * inv))
  h = jnp.where(delta > 0, jnp.mod(h / 6.0, 1.0), 0.0)
  h6 = 6.0 * jnp.mod(h + factor, 1.0)
  channels = []
  for offset in (5.0, 3.0, 1.0):
    k = jnp.mod(h6 + offset, 6.0)
    channels.append(maxc * (1.0 - s * jnp.clip(jnp.minimum(k, 4.0 - k), 0.0, 1.0)))
  return jnp.stack(channels, axis=-1) * 255.0


def _colour_jitter(x: jax.Array, p: jax.Array) -> jax.Array:
  """[H, W, 3] float -> the four adjustments in the row's order, with its factors (transforms.color_jitter).

  Under vmap each view may put the hue at another position, so a switch per position would compute the costly hue
  four times: instead the three blends before the hue run (the others as identity blends, factor 1), then the hue
  once, then the blends after it."""
  order = p[_F['order0']:_F['order0'] + 4].astype(jnp.int32)
  hue_at = jnp.sum(jnp.where(order == 3, jnp.arange(4), 0))

  def blend(y: jax.Array, position: int, active: jax.Array) -> jax.Array:
    op = order[position]  # brightness (0: with black), contrast (1: with the mean grey), saturation (2: with grey)
    gray = _gray(y)
    other = jnp.where(op == 0, 0.0, jnp.where(op == 1, jnp.mean(gray), gray))
    factor = jnp.where(op == 0, p[_F['brightness']], jnp.where(op == 1, p[_F['contrast']], p[_F['saturation']]))
    return _blend(y, other, jnp.where(active & (op != 3), factor, 1.0))

  for position in range(4):
    x = blend(x, position, position < hue_at)
  x = jnp.where(p[_F['hue']] != 0, _hue(x, p[_F['hue']]), x)
  for position in range(4):
    x = blend(x, position, position > hue_at)
  return _round(x)


def _blur(x: jax.Array, sigma: jax.Array) -> jax.Array:
  """[S, S, 3] float -> Gaussian blur with a per-view sigma and transforms.gaussian_blur's kernel size for S,
  separable, reflect-padded."""
  side = x.shape[0]
  size = min(transforms._kernel_size(side), 2 * (side - 1) + 1)  # pylint: disable=protected-access
  taps = jnp.arange(size, dtype=jnp.float32) - size // 2
  weights = jnp.exp(-taps**2 / (2.0 * sigma**2))
  weights = weights / weights.sum()
  radius = size // 2
  for axis in (0, 1):
    pad = [(0, 0)] * 3
    pad[axis] = (radius, radius)
    padded = jnp.pad(x, pad, mode='reflect')
    x = sum(weights[j] * jax.lax.slice_in_dim(padded, j, j + side, axis=axis) for j in range(size))
  return _round(x)


def render_view(source: jax.Array, p: jax.Array, size: int) -> jax.Array:
  """source [S, S, 3] float32 in [0, 255], one parameter row [VIEW_PARAMS] -> the view [size, size, 3] uint8: the
  crop resized (cubic, antialiased), flipped, colour-jittered, greyed, blurred and solarised as the row says."""
  side_h, side_w = source.shape[0], source.shape[1]
  top, left = p[_F['top']] * side_h, p[_F['left']] * side_w
  scale = jnp.stack([size / (p[_F['height']] * side_h), size / (p[_F['width']] * side_w)])
  translation = jnp.stack([-top * scale[0], -left * scale[1]])
  x = jax.image.scale_and_translate(source, (size, size, 3), (0, 1), scale, translation, method='cubic',
                                    antialias=True)
  x = _round(x)
  x = jnp.where(p[_F['flip']] > 0, x[:, ::-1], x)
  x = jnp.where(p[_F['jitter']] > 0, _colour_jitter(x, p), x)
  x = jnp.where(p[_F['grayscale']] > 0, jnp.broadcast_to(_round(_gray(x)), x.shape), x)
  x = jnp.where(p[_F['blur']] > 0, _blur(x, p[_F['sigma']]), x)
  x = jnp.where((p[_F['solarize']] > 0) & (x >= 128), 255.0 - x, x)
  return x.astype(jnp.uint8)


def render_views(source: jax.Array, params: jax.Array, size: int) -> jax.Array:
  """source [B, S, S, 3] uint8, params [B, ..., VIEW_PARAMS] -> views [B, ..., size, size, 3] uint8."""
  lead = params.shape[:-1]
  flat = params.reshape(lead[0], -1, params.shape[-1])
  views = jax.vmap(lambda src, rows: jax.vmap(lambda row: render_view(src, row, size))(rows))(
      source.astype(jnp.float32), flat)
  return views.reshape(*lead, size, size, 3)


def render_batch(batch: dict, views: dict[str, int]) -> dict:
  """The batch with SOURCE_KEY and every `<key>` + PARAMS_SUFFIX entry replaced by view `key` ([B, ..., size,
  size, 3] uint8) for each {key: size} of `views`; unchanged when `views` is empty (host-made views)."""
  if not views:
    return batch
  expected = [SOURCE_KEY, *(key + PARAMS_SUFFIX for key in views)]
  if missing := [key for key in expected if key not in batch]:
    raise KeyError(f"config.data.augment_on='device' renders the views from batch{missing}, which the batch lacks "
                   f'(it has {sorted(batch)}): were these batches made by the views of augment_on=\'host\'?')
  out = {k: v for k, v in batch.items() if k not in expected}
  for key, size in views.items():
    out[key] = render_views(batch[SOURCE_KEY], batch[key + PARAMS_SUFFIX], size)
  return out


def check_options(augment_on: str, source_size: int) -> None:
  """Raise ValueError naming the key unless config.data.augment_on is one of AUGMENT_ON and
  config.data.device_source_size a positive integer."""
  if augment_on not in AUGMENT_ON:
    raise ValueError(f'config.data.augment_on={augment_on!r} is not valid; valid choices: {list(AUGMENT_ON)}')
  if not isinstance(source_size, int) or isinstance(source_size, bool) or source_size < 1:
    raise ValueError(f'config.data.device_source_size must be a positive integer, got {source_size!r}')

