"""RandAugment / AutoAugment (vlp_jax/data/image/autoaugment.py): every op against torchvision on the same PIL image
(when torchvision loads), against naive references written from the definitions, its invariances, and the documented
order of the random draws."""
import fractions
import math

import numpy as np
import pytest
from PIL import Image, ImageFilter

from vlp_jax.data.image import autoaugment, transforms

ALL_OPS = autoaugment.RAND_AUGMENT_OPS + ('Invert',)
SIGNED_OPS = ('ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Rotate', 'Brightness', 'Color', 'Contrast', 'Sharpness')
GEOMETRIC_OPS = ('ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Rotate')
COLOUR_OPS = ('Brightness', 'Color', 'Contrast', 'Sharpness')
LUMA = np.array((0.2989, 0.587, 0.114))


def _image(seed=0, height=40, width=56, low=0, high=256):
  return np.random.default_rng(seed).integers(low, high, (height, width, 3), dtype=np.uint8)


def _rng(seed):
  return np.random.default_rng(seed)


def _magnitudes(name, height, width, bins=(0, 4, 9, 20, 30)):
  """Signed magnitudes of op `name` at some of RandAugment's 31 bins (both signs for a signed op)."""
  values = [autoaugment.bin_magnitude(name, b, 31, height, width) for b in bins]
  return values + [-v for v in values] if name in SIGNED_OPS else values


# ---------------------------------------------------------------------------------------------------------------------
# torchvision, on the same PIL image, as the independent reference.


@pytest.fixture(scope='module')
def tv_transforms():
  """torchvision.transforms; skipped without torchvision, or with a torchvision wheel built for another torch (whose
  import raises RuntimeError, not ImportError)."""
  try:
    pytest.importorskip('torchvision')
  except RuntimeError as error:
    pytest.skip(f'torchvision does not load with this torch: {error}')
  from torchvision import transforms  # pylint: disable=import-outside-toplevel
  return transforms


def _torchvision_op(tv, image, name, magnitude):
  """torchvision.transforms.functional on a PIL image, called as RandAugment / AutoAugment call it (_apply_op)."""
  functional, nearest = tv.functional, tv.InterpolationMode.NEAREST
  pil = Image.fromarray(image)
  geometric = {'interpolation': nearest, 'fill': None, 'scale': 1.0, 'angle': 0.0}
  shear = math.degrees(math.atan(magnitude))
  calls = {
      'Identity': lambda: pil,
      'ShearX': lambda: functional.affine(pil, translate=[0, 0], shear=[shear, 0.0], center=[0, 0], **geometric),
      'ShearY': lambda: functional.affine(pil, translate=[0, 0], shear=[0.0, shear], center=[0, 0], **geometric),
      'TranslateX': lambda: functional.affine(pil, translate=[int(magnitude), 0], shear=[0.0, 0.0], **geometric),
      'TranslateY': lambda: functional.affine(pil, translate=[0, int(magnitude)], shear=[0.0, 0.0], **geometric),
      'Rotate': lambda: functional.rotate(pil, magnitude, interpolation=nearest, fill=None),
      'Brightness': lambda: functional.adjust_brightness(pil, 1.0 + magnitude),
      'Color': lambda: functional.adjust_saturation(pil, 1.0 + magnitude),
      'Contrast': lambda: functional.adjust_contrast(pil, 1.0 + magnitude),
      'Sharpness': lambda: functional.adjust_sharpness(pil, 1.0 + magnitude),
      'Posterize': lambda: functional.posterize(pil, int(magnitude)),
      'Solarize': lambda: functional.solarize(pil, magnitude),
      'AutoContrast': lambda: functional.autocontrast(pil),
      'Equalize': lambda: functional.equalize(pil),
      'Invert': lambda: functional.invert(pil),
  }
  return np.asarray(calls[name]())


PARITY_IMAGES = [_image(0), _image(1, 33, 47, low=60, high=140), _image(2, 64, 64, low=3, high=251)]


@pytest.mark.parametrize('name', ALL_OPS)
def test_op_matches_torchvision_on_pil_images(tv_transforms, name):
  for image in PARITY_IMAGES:
    for magnitude in _magnitudes(name, *image.shape[:2]):
      ours = autoaugment.apply_op(image, name, magnitude)
      want = _torchvision_op(tv_transforms, image, name, magnitude)
      assert ours.shape == want.shape and ours.dtype == want.dtype
      diff = ours.astype(int) - want
      if name in COLOUR_OPS:
        # We round the float blend (as transforms.color_jitter); PIL truncates it, and takes Color's and Contrast's
        # greys from rounded integer luma: ours is the same or one grey level above.
        assert set(np.unique(diff)) <= {0, 1}, (name, magnitude)
      elif name == 'AutoContrast':
        # Ours is floor(255 (x - lo) / (hi - lo)) in integers; PIL's float form lands one below where that ratio is a
        # whole number (it can even send the maximum to 254).
        assert set(np.unique(diff)) <= {0, 1}
        for c in range(3):
          lo, hi = int(image[..., c].min()), int(image[..., c].max())
          assert np.all((image[..., c][diff[..., c] == 1].astype(int) - lo) * 255 % (hi - lo) == 0)
      else:
        np.testing.assert_array_equal(ours, want, err_msg=f'{name} {magnitude}')


def test_brightness_differs_from_torchvision_only_by_rounding(tv_transforms):
  image = _image(3)
  for magnitude in _magnitudes('Brightness', *image.shape[:2]):
    want = _torchvision_op(tv_transforms, image, 'Brightness', magnitude)
    blend = np.clip(image.astype(np.float32) * np.float32(1.0 + magnitude), 0, 255)
    np.testing.assert_array_equal(want, np.floor(blend))  # torchvision (PIL) truncates ...
    np.testing.assert_array_equal(autoaugment.brightness(image, magnitude), np.rint(blend))  # ... and we round


def test_magnitude_ranges_match_torchvision(tv_transforms):
  height, width = 40, 56
  spaces = {31: tv_transforms.RandAugment()._augmentation_space(31, (height, width)),
            10: tv_transforms.AutoAugment()._augmentation_space(10, (height, width))}
  assert tuple(spaces[31]) == autoaugment.RAND_AUGMENT_OPS  # the op index drawn means the same op
  for num_bins, space in spaces.items():
    for name, (magnitudes, signed) in space.items():
      assert autoaugment.is_signed(name) == signed, name
      for b in range(num_bins):
        want = float(magnitudes[b]) if magnitudes.ndim else 0.0
        got = autoaugment.bin_magnitude(name, b, num_bins, height, width)
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), (name, b)  # torch's linspace is float32


def test_imagenet_policy_matches_torchvision(tv_transforms):
  policy = tv_transforms.AutoAugment()._get_policies(tv_transforms.AutoAugmentPolicy.IMAGENET)
  assert autoaugment.IMAGENET_POLICY == tuple(tuple(sub_policy) for sub_policy in policy)


# ---------------------------------------------------------------------------------------------------------------------
# Naive references written from the definitions.


def test_posterize_keeps_the_top_bits():
  image = _image()
  for bits in range(1, 9):
    want = (image >> (8 - bits)) << (8 - bits)
    np.testing.assert_array_equal(autoaugment.posterize(image, bits), want)
    np.testing.assert_array_equal(autoaugment.apply_op(image, 'Posterize', float(bits) + 0.7), want)  # int(bits)
  np.testing.assert_array_equal(autoaugment.posterize(image, 4) % 16, 0)
  for bad in (0, 9):
    with pytest.raises(ValueError, match='bits'):
      autoaugment.posterize(image, bad)


def test_solarize_and_invert_follow_their_definitions():
  image = _image()
  for threshold in (0, 1, 128, 178.5, 255, 256):
    lut = np.array([v if v < threshold else 255 - v for v in range(256)], np.uint8)
    np.testing.assert_array_equal(autoaugment.solarize(image, threshold), lut[image])
  np.testing.assert_array_equal(autoaugment.solarize(image, 256), image)
  inverted = autoaugment.invert(image)
  np.testing.assert_array_equal(inverted.astype(int), 255 - image.astype(int))
  np.testing.assert_array_equal(autoaugment.solarize(image, 0), inverted)
  np.testing.assert_array_equal(autoaugment.invert(inverted), image)


def _naive_equalize_channel(channel):
  """PIL's equalize, by the definition: step = (pixels not at the lightest present value) // 255, and value v maps to
  (step // 2 + pixels darker than v) // step, capped at 255; unchanged for a single value or step 0."""
  counts = [0] * 256
  for v in channel.ravel().tolist():
    counts[v] += 1
  present = [c for c in counts if c]
  step = (sum(present) - present[-1]) // 255
  if len(present) <= 1 or step == 0:
    return channel
  lut, darker = [], 0
  for v in range(256):
    lut.append(min(255, (step // 2 + darker) // step))
    darker += counts[v]
  return np.array(lut, np.uint8)[channel]


def test_equalize_matches_the_histogram_definition():
  two_values = np.where(_image(4) > 127, 200, 50).astype(np.uint8)
  constant_channel = _image(5)
  constant_channel[..., 1] = 77
  few_pixels = _image(6, 10, 12)  # 120 pixels: step 0, unchanged
  for image in (_image(0), _image(1, 33, 47, low=60, high=140), two_values, constant_channel, few_pixels):
    want = np.stack([_naive_equalize_channel(image[..., c]) for c in range(3)], axis=-1)
    np.testing.assert_array_equal(autoaugment.equalize(image), want)
  np.testing.assert_array_equal(autoaugment.equalize(few_pixels), few_pixels)
  # Every value equally frequent: already equalized.
  flat = np.tile(np.arange(256, dtype=np.uint8), 12).reshape(48, 64, 1).repeat(3, axis=-1)
  np.testing.assert_array_equal(autoaugment.equalize(flat), flat)
  # A narrow histogram is spread over (nearly) the full range.
  spread = autoaugment.equalize(_image(7, low=100, high=120))
  assert spread.min() <= 10 and spread.max() >= 240


def test_autocontrast_stretches_each_channel_to_the_full_range():
  image = _image(1, low=60, high=140)
  image[..., 2] = 90  # a constant channel is left alone
  out = autoaugment.autocontrast(image)
  for c in range(2):
    lo, hi = int(image[..., c].min()), int(image[..., c].max())
    lut = [math.floor(fractions.Fraction(255 * (v - lo), hi - lo)) for v in range(256)]
    np.testing.assert_array_equal(out[..., c], np.clip(lut, 0, 255)[image[..., c]])
    assert out[..., c].min() == 0 and out[..., c].max() == 255
  np.testing.assert_array_equal(out[..., 2], image[..., 2])


def _assert_rounded(got, value):
  """got is `value` clipped to [0, 255] and rounded; within 1e-3 of a half (13.5 = 135 x 0.1), float32 may go either
  way."""
  value = np.clip(value, 0, 255)
  tie = np.abs(value - np.floor(value) - 0.5) < 1e-3
  np.testing.assert_array_equal(got[~tie], np.rint(value[~tie]))
  assert np.all((got[tie] == np.floor(value[tie])) | (got[tie] == np.ceil(value[tie])))


def _naive_smooth(image):
  """PIL's SMOOTH on the interior (weights 1 around, 5 at the centre, over 13, rounded); the border kept."""
  x = image.astype(np.float64)
  out = x.copy()
  for i in range(1, x.shape[0] - 1):
    for j in range(1, x.shape[1] - 1):
      out[i, j] = np.rint((x[i - 1:i + 2, j - 1:j + 2].sum(axis=(0, 1)) + 4 * x[i, j]) / 13)
  return out


def test_sharpness_blends_with_pils_smooth_filter():
  image = _image(8, 17, 23)
  smooth = _naive_smooth(image)
  np.testing.assert_array_equal(smooth, np.asarray(Image.fromarray(image).filter(ImageFilter.SMOOTH)))
  for magnitude in (-1.0, -0.27, 0.27, 0.9):
    _assert_rounded(autoaugment.sharpness(image, magnitude), smooth + (1 + magnitude) * (image - smooth))
  np.testing.assert_array_equal(autoaugment.sharpness(image, -1.0), smooth)  # factor 0: the blurred image
  flat = np.full((9, 9, 3), 123, np.uint8)
  np.testing.assert_array_equal(autoaugment.sharpness(flat, 0.9), flat)


def test_brightness_contrast_color_are_the_documented_blends():
  image = _image(9)
  x = image.astype(np.float64)
  luma = x @ LUMA
  for magnitude in (-0.9, -0.27, 0.0, 0.27, 0.9):
    factor = 1 + magnitude
    _assert_rounded(autoaugment.brightness(image, magnitude), factor * x)
    _assert_rounded(autoaugment.contrast(image, magnitude), luma.mean() + factor * (x - luma.mean()))
    _assert_rounded(autoaugment.color(image, magnitude), luma[..., None] + factor * (x - luma[..., None]))
  grey = autoaugment.color(image, -1.0)  # factor 0: the greyscale image
  assert np.all(grey[..., 0] == grey[..., 1]) and np.all(grey[..., 0] == grey[..., 2])
  assert np.abs(grey[..., 0] - luma).max() <= 0.5 + 1e-4
  np.testing.assert_array_equal(autoaugment.contrast(image, -1.0), np.full_like(image, round(luma.mean())))


def _shifted(image, dy, dx):
  """image moved down by dy and right by dx pixels, black coming in."""
  height, width = image.shape[:2]
  out = np.zeros_like(image)
  for y in range(height):
    for x in range(width):
      if 0 <= y - dy < height and 0 <= x - dx < width:
        out[y, x] = image[y - dy, x - dx]
  return out


def _naive_shear(image, magnitude, axis):
  """PIL's nearest sampling of the shear: output pixel (x, y) reads the input pixel containing (x + 0.5 + m (y + 0.5),
  y + 0.5) for ShearX ((x + 0.5, y + 0.5 + m (x + 0.5)) for ShearY), black outside."""
  height, width = image.shape[:2]
  ys, xs = np.mgrid[0:height, 0:width]
  if axis == 'x':
    xs = np.floor(xs + 0.5 + magnitude * (ys + 0.5)).astype(int)
  else:
    ys = np.floor(ys + 0.5 + magnitude * (xs + 0.5)).astype(int)
  inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
  out = np.zeros_like(image)
  out[inside] = image[ys[inside], xs[inside]]
  return out


def test_geometric_ops_move_pixels_as_defined():
  image = _image(10, 31, 45)
  for magnitude in (0.4, 7.9, -7.9, 20.0, -44.0):
    np.testing.assert_array_equal(autoaugment.translate_x(image, magnitude), _shifted(image, 0, int(magnitude)))
    np.testing.assert_array_equal(autoaugment.translate_y(image, magnitude), _shifted(image, int(magnitude), 0))
  for magnitude in (0.09, -0.27, 0.3):  # none puts a sample exactly on a pixel edge
    np.testing.assert_array_equal(autoaugment.shear_x(image, magnitude), _naive_shear(image, magnitude, 'x'))
    np.testing.assert_array_equal(autoaugment.shear_y(image, magnitude), _naive_shear(image, magnitude, 'y'))
  np.testing.assert_array_equal(autoaugment.rotate(image, 180.0), image[::-1, ::-1])
  square = _image(11, 24, 24)
  np.testing.assert_array_equal(autoaugment.rotate(square, 90.0), np.rot90(square))  # counter-clockwise
  np.testing.assert_array_equal(autoaugment.rotate(square, -90.0), np.rot90(square, -1))
  corners = autoaugment.rotate(_image(12, 40, 40, low=1), 30.0)
  assert np.all(corners[0, 0] == 0) and np.all(corners[20, 20] > 0)  # black fill outside, content inside


# ---------------------------------------------------------------------------------------------------------------------
# Magnitudes and invariances.


def test_magnitude_table():
  assert autoaugment.bin_magnitude('ShearX', 9, 31, 40, 56) == pytest.approx(0.09)
  assert autoaugment.bin_magnitude('Rotate', 9, 31, 40, 56) == pytest.approx(9.0)
  assert autoaugment.bin_magnitude('Brightness', 9, 31, 40, 56) == pytest.approx(0.27)
  assert autoaugment.bin_magnitude('Sharpness', 30, 31, 40, 56) == pytest.approx(0.9)
  assert autoaugment.bin_magnitude('TranslateX', 30, 31, 40, 56) == pytest.approx(150 / 331 * 56)  # the width
  assert autoaugment.bin_magnitude('TranslateY', 30, 31, 40, 56) == pytest.approx(150 / 331 * 40)  # the height
  assert autoaugment.bin_magnitude('Solarize', 9, 31, 40, 56) == 178.5
  assert autoaugment.bin_magnitude('Solarize', 10, 31, 40, 56) == 170.0  # exact, so 170 itself is inverted
  assert [autoaugment.bin_magnitude('Posterize', b, 31, 8, 8) for b in range(31)] == \
      [8.0] * 4 + [7.0] * 8 + [6.0] * 7 + [5.0] * 8 + [4.0] * 4
  assert [autoaugment.bin_magnitude('Posterize', b, 10, 8, 8) for b in range(10)] == \
      [8.0, 8.0, 7.0, 7.0, 6.0, 6.0, 5.0, 5.0, 4.0, 4.0]
  for name in ('Identity', 'AutoContrast', 'Equalize', 'Invert'):
    assert autoaugment.bin_magnitude(name, 9, 31, 40, 56) == 0.0
  assert tuple(name for name in ALL_OPS if autoaugment.is_signed(name)) == SIGNED_OPS
  with pytest.raises(ValueError, match='bin'):
    autoaugment.bin_magnitude('Rotate', 31, 31, 40, 56)


def test_magnitude_zero_is_the_identity():
  image = _image(13, 31, 45)
  for name in ('Identity',) + SIGNED_OPS + ('Posterize',):  # bin 0: no move, factor 1, 8 bits
    out = autoaugment.apply_op(image, name, autoaugment.bin_magnitude(name, 0, 31, 31, 45))
    np.testing.assert_array_equal(out, image, err_msg=name)
  # Solarize's bin 0 (threshold 255) only inverts the 255s.
  np.testing.assert_array_equal(autoaugment.apply_op(image, 'Solarize', 255.0), np.where(image == 255, 0, image))


@pytest.mark.parametrize('shape', [(31, 45), (224, 224), (1, 1), (2, 3)])
def test_every_op_keeps_shape_and_dtype_and_leaves_its_input_alone(shape):
  image = _image(14, *shape)
  before = image.copy()
  for name in ALL_OPS:
    for magnitude in _magnitudes(name, *shape, bins=(0, 9, 30)):
      out = autoaugment.apply_op(image, name, magnitude)
      assert out.shape == image.shape and out.dtype == np.uint8, (name, magnitude)
  np.testing.assert_array_equal(image, before)
  with pytest.raises(ValueError, match='valid ops'):
    autoaugment.apply_op(image, 'Cutout', 1.0)


# ---------------------------------------------------------------------------------------------------------------------
# rand_augment and auto_augment: determinism and the documented draws.


@pytest.mark.parametrize('name', sorted(autoaugment.AUGMENTATIONS))
def test_deterministic_per_seed(name):
  augment, image = autoaugment.AUGMENTATIONS.get(name), _image(15)
  before = image.copy()
  outputs = [augment(image, _rng(seed)) for seed in (0, 0, 1, 2, 3, 4, 5)]
  np.testing.assert_array_equal(outputs[0], outputs[1])
  assert not all(np.array_equal(outputs[0], other) for other in outputs[2:])  # it is random
  for out in outputs:
    assert out.shape == image.shape and out.dtype == np.uint8
  np.testing.assert_array_equal(image, before)


@pytest.fixture
def spy(monkeypatch):
  """Records (op name, magnitude) for every op the augmentations apply, and applies none."""
  calls = []

  def record(image, name, magnitude):
    calls.append((name, magnitude))
    return image

  monkeypatch.setattr(autoaugment, 'apply_op', record)
  return calls


def test_rand_augment_applies_num_ops_ops_in_the_documented_draw_order(spy):
  image = _image(16, 40, 56)
  for num_ops in (0, 1, 2, 4):
    for seed in range(25):
      spy.clear()
      rng = _rng(seed)
      autoaugment.rand_augment(image, rng, num_ops=num_ops, magnitude=9)
      assert len(spy) == num_ops
      replay, want = _rng(seed), []
      for _ in range(num_ops):  # per op: the op index; then a sign bit for a signed op only
        name = autoaugment.RAND_AUGMENT_OPS[replay.integers(14)]
        value = autoaugment.bin_magnitude(name, 9, 31, 40, 56)
        want.append((name, -value if name in SIGNED_OPS and replay.integers(2) else value))
      assert spy == want
      assert rng.random() == replay.random()  # and no other draws


def test_rand_augment_picks_every_op_and_either_sign(spy):
  image = _image(17)
  for seed in range(600):
    autoaugment.rand_augment(image, _rng(seed), num_ops=1)
  names = [name for name, _ in spy]
  counts = {name: names.count(name) for name in autoaugment.RAND_AUGMENT_OPS}
  assert min(counts.values()) > 600 / 14 / 2, counts  # uniform over the 14 ops: about 43 each
  signed = [magnitude for name, magnitude in spy if name in SIGNED_OPS]
  assert 0.4 < np.mean(np.array(signed) < 0) < 0.6


def test_auto_augment_draws_as_documented(spy):
  image = _image(18, 40, 56)
  applied = 0
  for seed in range(200):
    spy.clear()
    rng = _rng(seed)
    autoaugment.auto_augment(image, rng)
    replay = _rng(seed)  # the sub-policy, two uniforms, two sign bits: always all five
    sub_policy = autoaugment.IMAGENET_POLICY[replay.integers(25)]
    uniforms, bits = replay.random(2), replay.integers(2, size=2)
    want = []
    for (name, probability, bin_index), uniform, bit in zip(sub_policy, uniforms, bits):
      if uniform < probability:
        value = autoaugment.bin_magnitude(name, bin_index, 10, 40, 56)
        want.append((name, -value if name in SIGNED_OPS and bit else value))
    assert spy == want
    assert rng.random() == replay.random()
    applied += len(spy)
  assert 0.5 * 200 < applied < 1.6 * 200  # the policy's probabilities average 0.62 per op


def test_imagenet_policy_shape():
  assert len(autoaugment.IMAGENET_POLICY) == 25
  for sub_policy in autoaugment.IMAGENET_POLICY:
    assert len(sub_policy) == 2
    for name, probability, bin_index in sub_policy:
      assert name in ALL_OPS and 0.0 <= probability <= 1.0
      assert (bin_index is None) == (name in ('AutoContrast', 'Equalize', 'Invert'))
      assert bin_index is None or 0 <= bin_index < 10


def test_bad_arguments_are_rejected():
  image, rng = _image(), _rng(0)
  with pytest.raises(ValueError, match='magnitude=31'):
    autoaugment.rand_augment(image, rng, magnitude=31)
  with pytest.raises(ValueError, match='imagenet'):
    autoaugment.auto_augment(image, rng, policy='cifar10')
  for bad in (image[..., 0], image.astype(np.float32), image[..., :2]):
    with pytest.raises(ValueError, match='uint8'):
      autoaugment.rand_augment(bad, rng)


def test_registry():
  assert autoaugment.AUGMENTATIONS.get('randaugment') is autoaugment.rand_augment
  assert autoaugment.AUGMENTATIONS.get('autoaugment') is autoaugment.auto_augment
  assert autoaugment.AUGMENTATIONS.get('dino') is transforms.dino_global_view
  with pytest.raises(ValueError, match="'randaugment', 'autoaugment'"):
    autoaugment.AUGMENTATIONS.get('trivialaugment')
