"""RandAugment and AutoAugment (ImageNet policy) on [H, W, 3] uint8 numpy images, with torchvision's semantics.

The ops, their magnitude ranges and the order of the random draws follow torchvision.transforms.RandAugment(num_ops=2,
magnitude=9, num_magnitude_bins=31) and AutoAugment(AutoAugmentPolicy.IMAGENET) applied to PIL images:

  op            magnitude over the bins (first -> last)   signed   what it does
  Identity      -                                           no       nothing
  ShearX        0 -> 0.3                                    yes      x_in = x + m y (about the top-left corner)
  ShearY        0 -> 0.3                                    yes      y_in = y + m x
  TranslateX    0 -> 150/331 * width                        yes      shift right by int(m) pixels (toward zero)
  TranslateY    0 -> 150/331 * height                       yes      shift down by int(m) pixels
  Rotate        0 -> 30                                     yes      m degrees counter-clockwise about the centre
  Brightness    0 -> 0.9                                    yes      blend with black, factor 1 + m
  Color         0 -> 0.9                                    yes      blend with the greyscale image, factor 1 + m
  Contrast      0 -> 0.9                                    yes      blend with the mean grey level, factor 1 + m
  Sharpness     0 -> 0.9                                    yes      blend with PIL's SMOOTH blur, factor 1 + m
  Posterize     8 - round(4 bin / (bins - 1)) bits: 8 -> 4  no       keep the top int(m) bits
  Solarize      255 -> 0                                    no       invert the pixels >= m
  AutoContrast  -                                           no       stretch each channel to [0, 255]
  Equalize      -                                           no       equalize each channel's histogram
  Invert        - (AutoAugment only)                        no       255 - x

Bin b of n holds first + (last - first) b / (n - 1) (torch.linspace); RandAugment's default bin 9 of 31 gives
ShearX 0.09, TranslateX 0.3 * 150/331 * width, Rotate 9 degrees, the enhance factors 1 +- 0.27, Posterize 7 bits and
Solarize 178.5. Signed magnitudes are negated with probability 1/2 (see `rand_augment` and `auto_augment` for when
that bit is drawn).

Exactness against torchvision on PIL images: the geometric ops are PIL's own affine transforms (nearest, fill 0) with
the matrices torchvision builds, and Posterize, Solarize, Equalize and Invert are integer look-up tables, so these match
bit for bit. AutoContrast maps x to floor(255 (x - lo) / (hi - lo)) in exact integers; PIL's float form of it can land
one grey level lower where that ratio is a whole number. The colour ops blend in float32 and round, as
transforms.color_jitter does, where PIL truncates (and takes its greys from rounded integer luma), so they can be one
grey level above torchvision's.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from PIL import Image

from vlp_jax.data.image import transforms
from vlp_jax.registry import Registry

Augmentation = Callable[[np.ndarray, np.random.Generator], np.ndarray]

_FILL = (0, 0, 0)  # torchvision's default fill for the geometric ops
# The maximum translation, as a fraction of the image side: 150 pixels of the AutoAugment paper's 331-pixel images.
_MAX_TRANSLATE = 150.0 / 331.0


def _affine(image: np.ndarray, inverse: tuple[float, float, float, float, float, float]) -> np.ndarray:
  """[H, W, 3] uint8 -> [H, W, 3] uint8: output pixel (x, y) takes the input pixel nearest to (a x + b y + c,
  d x + e y + f) for `inverse` = (a, b, c, d, e, f) (PIL's AFFINE, pixel centres at half-integers); black outside."""
  height, width = image.shape[:2]
  out = Image.fromarray(image).transform((width, height), Image.Transform.AFFINE, inverse,
                                         Image.Resampling.NEAREST, fillcolor=_FILL)
  return np.asarray(out)


def shear_x(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: horizontal shear about the top-left corner, x_in = x + magnitude * y (torchvision shears
  by the angle atan(magnitude), whose tangent is the magnitude)."""
  return _affine(image, (1.0, magnitude, 0.0, 0.0, 1.0, 0.0))


def shear_y(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: vertical shear about the top-left corner, y_in = y + magnitude * x."""
  return _affine(image, (1.0, 0.0, 0.0, magnitude, 1.0, 0.0))


def translate_x(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: content moved right by int(magnitude) pixels (truncated toward zero, as torchvision);
  black comes in on the other side."""
  return _affine(image, (1.0, 0.0, -float(int(magnitude)), 0.0, 1.0, 0.0))


def translate_y(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: content moved down by int(magnitude) pixels."""
  return _affine(image, (1.0, 0.0, 0.0, 0.0, 1.0, -float(int(magnitude))))


def rotate(image: np.ndarray, degrees: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: rotated counter-clockwise by `degrees` about the image centre, same size, nearest,
  black corners (PIL's rotate, which torchvision's rotate calls for PIL images)."""
  out = Image.fromarray(image).rotate(degrees, Image.Resampling.NEAREST, expand=False, fillcolor=_FILL)
  return np.asarray(out)


def brightness(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: blend with black, factor 1 + magnitude."""
  return transforms._to_uint8(transforms._blend(image.astype(np.float32), 0.0, 1.0 + magnitude))


def color(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: saturation, a blend with the image's own greyscale, factor 1 + magnitude."""
  pixels = image.astype(np.float32)
  return transforms._to_uint8(transforms._blend(pixels, transforms._grayscale(pixels), 1.0 + magnitude))


def contrast(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: blend with the image's mean grey level, factor 1 + magnitude."""
  pixels = image.astype(np.float32)
  mean = float(transforms._grayscale(pixels).mean())
  return transforms._to_uint8(transforms._blend(pixels, mean, 1.0 + magnitude))


def _smoothed(pixels: np.ndarray) -> np.ndarray:
  """float [H, W, 3] holding integers -> float [H, W, 3]: PIL's SMOOTH filter (3 x 3, 5 at the centre and 1 around,
  over 13), rounded, on the interior; the one-pixel border is kept, as PIL and torchvision do."""
  height, width = pixels.shape[:2]
  out = pixels.copy()
  if height < 3 or width < 3:
    return out
  total = 4.0 * pixels[1:-1, 1:-1]  # the centre's weight 5: 4 here and 1 in the 3 x 3 sum below
  for dy in range(3):
    for dx in range(3):
      total += pixels[dy:dy + height - 2, dx:dx + width - 2]
  out[1:-1, 1:-1] = np.rint(total / 13.0)  # never a tie: 2 * total is even, 13 * odd is odd
  return out


def sharpness(image: np.ndarray, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: blend with the smoothed image, factor 1 + magnitude (> 1 sharpens, < 1 blurs)."""
  pixels = image.astype(np.float32)
  return transforms._to_uint8(transforms._blend(pixels, _smoothed(pixels), 1.0 + magnitude))


def posterize(image: np.ndarray, bits: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: only the top int(bits) bits of each value kept, 1 <= bits <= 8."""
  bits = int(bits)
  if not 1 <= bits <= 8:
    raise ValueError(f'posterize keeps 1 to 8 bits, not {bits}')
  return image & np.uint8(0xFF << (8 - bits) & 0xFF)


def solarize(image: np.ndarray, threshold: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: the values >= threshold inverted (255 - x), the rest unchanged."""
  return np.where(image >= threshold, 255 - image, image).astype(np.uint8)


def _per_channel_lut(image: np.ndarray, lut_for: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: channel c mapped through lut_for(histogram of c), a [256] table of values in [0, 255]."""
  out = np.empty_like(image)
  for c in range(image.shape[-1]):
    histogram = np.bincount(image[..., c].ravel(), minlength=256)
    out[..., c] = lut_for(histogram).astype(np.uint8)[image[..., c]]
  return out


def _autocontrast_lut(histogram: np.ndarray) -> np.ndarray:
  """[256] counts -> [256] table: the darkest present value lo to 0, the lightest hi to 255, linearly (floored) in
  between; the identity when the channel is constant."""
  present = np.flatnonzero(histogram)
  lo, hi = int(present[0]), int(present[-1])
  values = np.arange(256)
  if hi <= lo:
    return values
  return np.clip((values - lo) * 255 // (hi - lo), 0, 255)


def autocontrast(image: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: each channel stretched so that its minimum becomes 0 and its maximum 255."""
  return _per_channel_lut(image, _autocontrast_lut)


def _equalize_lut(histogram: np.ndarray) -> np.ndarray:
  """[256] counts -> [256] table, PIL's equalize: with step = (number of pixels not at the lightest present value)
  // 255, value v goes to (step // 2 + number of pixels darker than v) // step, capped at 255; the identity when a
  single value is present or step is 0."""
  present = histogram[histogram > 0]
  if len(present) <= 1:
    return np.arange(256)
  step = (int(present.sum()) - int(present[-1])) // 255
  if step == 0:
    return np.arange(256)
  darker = np.concatenate([[0], np.cumsum(histogram)[:-1]])
  return np.minimum((step // 2 + darker) // step, 255)


def equalize(image: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: each channel's histogram equalized."""
  return _per_channel_lut(image, _equalize_lut)


def invert(image: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: 255 - x."""
  return 255 - image


# op name -> f(image, signed magnitude) -> image, as torchvision's _apply_op.
_OPS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    'Identity': lambda image, _: image,
    'ShearX': shear_x,
    'ShearY': shear_y,
    'TranslateX': translate_x,
    'TranslateY': translate_y,
    'Rotate': rotate,
    'Brightness': brightness,
    'Color': color,
    'Contrast': contrast,
    'Sharpness': sharpness,
    'Posterize': posterize,
    'Solarize': solarize,
    'AutoContrast': lambda image, _: autocontrast(image),
    'Equalize': lambda image, _: equalize(image),
    'Invert': lambda image, _: invert(image),
}

# RandAugment's ops, in torchvision's order (the op index drawn picks from this tuple).
RAND_AUGMENT_OPS = ('Identity', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Rotate', 'Brightness', 'Color',
                    'Contrast', 'Sharpness', 'Posterize', 'Solarize', 'AutoContrast', 'Equalize')

# Ops with linearly spaced magnitudes: (first, last, signed); the translations' are fractions of the image side.
_LINEAR_MAGNITUDES = {
    'ShearX': (0.0, 0.3, True),
    'ShearY': (0.0, 0.3, True),
    'TranslateX': (0.0, _MAX_TRANSLATE, True),
    'TranslateY': (0.0, _MAX_TRANSLATE, True),
    'Rotate': (0.0, 30.0, True),
    'Brightness': (0.0, 0.9, True),
    'Color': (0.0, 0.9, True),
    'Contrast': (0.0, 0.9, True),
    'Sharpness': (0.0, 0.9, True),
    'Solarize': (255.0, 0.0, False),
}


def is_signed(name: str) -> bool:
  """Whether op `name`'s magnitude is negated with probability 1/2."""
  return name in _LINEAR_MAGNITUDES and _LINEAR_MAGNITUDES[name][2]


def bin_magnitude(name: str, bin_index: int | None, num_bins: int, height: int, width: int) -> float:
  """The unsigned magnitude of op `name` at bin `bin_index` of `num_bins` (torchvision's _augmentation_space) for an
  image of height x width; 0 for the ops without one (or bin None)."""
  if bin_index is None or (name not in _LINEAR_MAGNITUDES and name != 'Posterize'):
    return 0.0
  if not 0 <= bin_index < num_bins or num_bins < 2:
    raise ValueError(f'magnitude bin {bin_index} is not one of {num_bins} (>= 2) bins')
  if name == 'Posterize':  # bits, 8 -> 4 (rounded half to even, as torch.round)
    return float(8 - int(np.rint(bin_index / ((num_bins - 1) / 4))))
  first, last, _ = _LINEAR_MAGNITUDES[name]
  side = {'TranslateX': width, 'TranslateY': height}.get(name, 1)
  first, last = first * side, last * side
  # Multiply before dividing, so that whole-number magnitudes (Solarize's 170 of 255 -> 0) come out exact.
  return first + (last - first) * bin_index / (num_bins - 1)


def apply_op(image: np.ndarray, name: str, magnitude: float) -> np.ndarray:
  """[H, W, 3] uint8 -> uint8: op `name` with its (signed) magnitude, as torchvision's _apply_op."""
  if name not in _OPS:
    raise ValueError(f"Unknown augmentation op '{name}'; valid ops: {sorted(_OPS)}")
  return _OPS[name](image, magnitude)


def _check_image(image: np.ndarray) -> None:
  if image.ndim != 3 or image.shape[-1] != 3 or image.dtype != np.uint8:
    raise ValueError(f'expected an [H, W, 3] uint8 image, got {image.shape} {image.dtype}')


def rand_augment(image: np.ndarray, rng: np.random.Generator, num_ops: int = 2, magnitude: int = 9,
                 num_magnitude_bins: int = 31) -> np.ndarray:
  """[H, W, 3] uint8 -> [H, W, 3] uint8: torchvision's RandAugment, `num_ops` ops applied one after the other, each
  picked uniformly (with replacement) from RAND_AUGMENT_OPS, all at bin `magnitude` of `num_magnitude_bins`.

  Draws, for each op in turn: rng.integers(14), the op's index in RAND_AUGMENT_OPS; then, only for a signed op,
  rng.integers(2), which negates the magnitude when 1. torchvision draws in the same order from torch's generator.
  """
  _check_image(image)
  if not 0 <= magnitude < num_magnitude_bins:
    raise ValueError(f'magnitude={magnitude} must be in [0, num_magnitude_bins={num_magnitude_bins})')
  height, width = image.shape[:2]
  for _ in range(num_ops):
    name = RAND_AUGMENT_OPS[int(rng.integers(len(RAND_AUGMENT_OPS)))]
    value = bin_magnitude(name, magnitude, num_magnitude_bins, height, width)
    if is_signed(name) and rng.integers(2):
      value = -value
    image = apply_op(image, name, value)
  return image


# AutoAugment's ImageNet policy as torchvision has it: 25 sub-policies of two (op, probability, magnitude bin of 10).
IMAGENET_POLICY = (
    (('Posterize', 0.4, 8), ('Rotate', 0.6, 9)),
    (('Solarize', 0.6, 5), ('AutoContrast', 0.6, None)),
    (('Equalize', 0.8, None), ('Equalize', 0.6, None)),
    (('Posterize', 0.6, 7), ('Posterize', 0.6, 6)),
    (('Equalize', 0.4, None), ('Solarize', 0.2, 4)),
    (('Equalize', 0.4, None), ('Rotate', 0.8, 8)),
    (('Solarize', 0.6, 3), ('Equalize', 0.6, None)),
    (('Posterize', 0.8, 5), ('Equalize', 1.0, None)),
    (('Rotate', 0.2, 3), ('Solarize', 0.6, 8)),
    (('Equalize', 0.6, None), ('Posterize', 0.4, 6)),
    (('Rotate', 0.8, 8), ('Color', 0.4, 0)),
    (('Rotate', 0.4, 9), ('Equalize', 0.6, None)),
    (('Equalize', 0.0, None), ('Equalize', 0.8, None)),
    (('Invert', 0.6, None), ('Equalize', 1.0, None)),
    (('Color', 0.6, 4), ('Contrast', 1.0, 8)),
    (('Rotate', 0.8, 8), ('Color', 1.0, 2)),
    (('Color', 0.8, 8), ('Solarize', 0.8, 7)),
    (('Sharpness', 0.4, 7), ('Invert', 0.6, None)),
    (('ShearX', 0.6, 5), ('Equalize', 1.0, None)),
    (('Color', 0.4, 0), ('Equalize', 0.6, None)),
    (('Equalize', 0.4, None), ('Solarize', 0.2, 4)),
    (('Solarize', 0.6, 5), ('AutoContrast', 0.6, None)),
    (('Invert', 0.6, None), ('Equalize', 1.0, None)),
    (('Color', 0.6, 4), ('Contrast', 1.0, 8)),
    (('Equalize', 0.8, None), ('Equalize', 0.6, None)),
)
POLICIES = {'imagenet': IMAGENET_POLICY}
_AUTO_AUGMENT_BINS = 10


def auto_augment(image: np.ndarray, rng: np.random.Generator, policy: str = 'imagenet') -> np.ndarray:
  """[H, W, 3] uint8 -> [H, W, 3] uint8: torchvision's AutoAugment, one sub-policy of `policy` picked uniformly, each
  of its two ops applied with its probability, at its bin of 10.

  Draws, always all of them and in this order (torchvision's get_params): rng.integers(25), the sub-policy;
  rng.random(2), uniforms in [0, 1): op i runs when uniform i < its probability; rng.integers(2, size=2): a running
  signed op i has its magnitude negated when bit i is 1. (torchvision runs op i when uniform i <= p, which differs only
  when a uniform is exactly p.)
  """
  _check_image(image)
  if policy not in POLICIES:
    raise ValueError(f"Unknown AutoAugment policy '{policy}'; valid policies: {sorted(POLICIES)}")
  sub_policies = POLICIES[policy]
  height, width = image.shape[:2]
  sub_policy = sub_policies[int(rng.integers(len(sub_policies)))]
  uniforms = rng.random(2)
  sign_bits = rng.integers(2, size=2)
  for (name, probability, bin_index), uniform, sign_bit in zip(sub_policy, uniforms, sign_bits):
    if uniform >= probability:
      continue
    value = bin_magnitude(name, bin_index, _AUTO_AUGMENT_BINS, height, width)
    if is_signed(name) and sign_bit:
      value = -value
    image = apply_op(image, name, value)
  return image


# config.data.augment name -> f(image, rng) -> image, with the defaults above.
AUGMENTATIONS: Registry[Augmentation] = Registry('augmentation', 'data.augment')
AUGMENTATIONS.add('randaugment', rand_augment)
AUGMENTATIONS.add('autoaugment', auto_augment)
AUGMENTATIONS.add('dino', transforms.dino_global_view)  # COSMOS's CLIP baseline (data/image/transforms.py)
