"""Host-side augmentations: deterministic per generator state, the right shapes and dtypes, torchvision semantics
(crop scale and ratio, the centre-crop fallback, colorsys hue) and each op doing what it says."""
import colorsys
import io

import grain
import numpy as np
from PIL import Image
import pytest

from vlp_jax.data.image import image_ops, transforms
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.image.image_ops import resize_image


def _image(seed=0, height=40, width=56):
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _rng(seed):
  return np.random.default_rng(seed)


RANDOM_OPS = {
    'random_resized_crop': lambda x, rng: transforms.random_resized_crop(x, 24, (0.08, 1.0), rng),
    'color_jitter': lambda x, rng: transforms.color_jitter(x, rng),
    'random_grayscale': lambda x, rng: transforms.random_grayscale(x, rng, p=0.5),
    'gaussian_blur': lambda x, rng: transforms.gaussian_blur(x, rng),
    'solarize': lambda x, rng: transforms.solarize(x, rng, p=0.5),
    'horizontal_flip': lambda x, rng: transforms.horizontal_flip(x, rng),
    'simclr_view': lambda x, rng: transforms.simclr_view(x, 24, rng),
    'dino_global_view': transforms.dino_global_view,
}


@pytest.mark.parametrize('name', sorted(RANDOM_OPS))
def test_deterministic_per_seed_with_right_shape_and_dtype(name):
  op, image = RANDOM_OPS[name], _image()
  outputs = [op(image.copy(), _rng(seed)) for seed in (0, 0, 1, 2, 3, 4, 5)]
  np.testing.assert_array_equal(outputs[0], outputs[1])
  assert not all(np.array_equal(outputs[0], other) for other in outputs[2:])  # it is random
  want_shape = (24, 24, 3) if name in ('random_resized_crop', 'simclr_view') else image.shape
  for out in outputs:
    assert out.shape == want_shape and out.dtype == np.uint8


def test_crop_box_respects_scale_and_ratio():
  scale, ratio = (0.3, 0.6), (3 / 4, 4 / 3)
  for seed in range(300):
    top, left, h, w = transforms._crop_box(120, 160, scale, ratio, _rng(seed))
    assert 0 <= top <= 120 - h and 0 <= left <= 160 - w
    # w and h are rounded to whole pixels: allow one pixel of slack on each side.
    assert scale[0] * 120 * 160 <= (h + 1) * (w + 1) and (h - 1) * (w - 1) <= scale[1] * 120 * 160
    assert ratio[0] * (h - 1) <= w + 1 and w - 1 <= ratio[1] * (h + 1)


def test_crop_box_falls_back_to_a_centre_crop():
  # No crop of 90% of a 10 x 100 strip has an aspect ratio in [3/4, 4/3]: the centre crop with ratio 4/3.
  assert transforms._crop_box(10, 100, (0.9, 1.0), (3 / 4, 4 / 3), _rng(0)) == (0, 43, 10, 13)
  assert transforms._crop_box(100, 10, (0.9, 1.0), (3 / 4, 4 / 3), _rng(0)) == (43, 0, 13, 10)


def test_full_crop_is_a_bicubic_resize():
  image = _image(height=48, width=48)
  out = transforms.random_resized_crop(image, 32, (1.0, 1.0), _rng(0), ratio=(1.0, 1.0))
  np.testing.assert_array_equal(out, resize_image(image, 32))


def test_flip_grayscale_solarize_do_what_they_say():
  image, rng = _image(), _rng(0)
  np.testing.assert_array_equal(transforms.horizontal_flip(image, rng, p=1.0), image[:, ::-1])
  np.testing.assert_array_equal(transforms.horizontal_flip(image, rng, p=0.0), image)
  gray = transforms.random_grayscale(image, rng, p=1.0)
  assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 0] == gray[..., 2]).all()
  luma = image.astype(np.float64) @ np.array([0.2989, 0.587, 0.114])
  np.testing.assert_allclose(gray[..., 0], luma, atol=0.51)
  np.testing.assert_array_equal(transforms.random_grayscale(image, rng, p=0.0), image)
  solar = transforms.solarize(image, rng, p=1.0, threshold=100)
  np.testing.assert_array_equal(solar, np.where(image >= 100, 255 - image, image))
  np.testing.assert_array_equal(transforms.solarize(image, rng, p=0.0), image)


def test_flip_probability():
  image = _image()
  flips = [not np.array_equal(transforms.horizontal_flip(image, _rng(s)), image) for s in range(400)]
  assert 0.4 < np.mean(flips) < 0.6


def test_color_jitter_ops():
  image = _image()
  # Zero strengths leave the image unchanged.
  np.testing.assert_array_equal(transforms.color_jitter(image, _rng(0), 0.0, 0.0, 0.0, 0.0), image)
  # Brightness alone scales every pixel by one factor in [0.6, 1.4].
  flat = np.full((8, 8, 3), 100, np.uint8)
  values = {int(transforms.color_jitter(flat, _rng(s), 0.4, 0.0, 0.0, 0.0)[0, 0, 0]) for s in range(50)}
  assert min(values) >= 60 and max(values) <= 140 and len(values) > 10
  # Contrast and saturation are identities on a flat grey image; hue and saturation on any grey image.
  np.testing.assert_array_equal(transforms.color_jitter(flat, _rng(1), 0.0, 0.4, 0.4, 0.1), flat)
  gray = np.repeat(_image()[..., :1], 3, axis=-1)
  np.testing.assert_array_equal(transforms.color_jitter(gray, _rng(2), 0.0, 0.0, 0.4, 0.1), gray)


def test_hue_matches_colorsys():
  image = _image(height=6, width=7)
  shift = 0.23
  got = transforms._adjust_hue(image.astype(np.float32), shift)
  for (i, j), pixel in np.ndenumerate(image[..., 0]):
    h, s, v = colorsys.rgb_to_hsv(*(image[i, j] / 255.0))
    want = np.array(colorsys.hsv_to_rgb((h + shift) % 1.0, s, v)) * 255.0
    np.testing.assert_allclose(got[i, j], want, atol=1e-3)


def test_gaussian_blur():
  assert transforms._kernel_size(224) == 23  # SimCLR: 10% of 224, made odd
  assert transforms._kernel_size(32) == 3
  flat = np.full((32, 32, 3), 77, np.uint8)
  np.testing.assert_array_equal(transforms.gaussian_blur(flat, _rng(0), p=1.0), flat)
  impulse = np.zeros((64, 64, 3), np.uint8)
  impulse[32, 32] = 255
  blurred = transforms.gaussian_blur(impulse, _rng(0), sigma=(2.0, 2.0), p=1.0).astype(np.float64)
  assert blurred[32, 32, 0] < 255 and blurred[32, 35, 0] > 0 and blurred[32, 36, 0] == 0  # kernel 7 for side 64
  np.testing.assert_allclose(blurred[32, 29:32, 0], blurred[32, 35:32:-1, 0])  # symmetric about the impulse
  np.testing.assert_allclose(blurred[..., 0], blurred[..., 0].T)  # the same blur along both axes
  np.testing.assert_allclose(blurred.sum(), 3 * 255, rtol=0.05)  # mass preserved, up to rounding
  np.testing.assert_array_equal(transforms.gaussian_blur(impulse, _rng(0), p=0.0), impulse)


def _hues(image):
  """Hue of every pixel, as a fraction of a turn."""
  return np.array([colorsys.rgb_to_hsv(*(p / 255.0))[0] for p in image.reshape(-1, 3).astype(np.float64)])


def test_simclr_view_keeps_colours_without_hue_jitter_and_grayscale():
  # A flat orange image: crops, blur and flips leave it flat, so only the colour ops can change its hue.
  orange = np.broadcast_to(np.array([250, 127, 14], np.uint8), (32, 32, 3)).copy()
  want = colorsys.rgb_to_hsv(250 / 255, 127 / 255, 14 / 255)[0]
  kept, moved = [], []
  for seed in range(40):
    view = transforms.simclr_view(orange, 16, _rng(seed), jitter=(0.4, 0.4, 0.4, 0.0), grayscale_p=0.0)
    kept.append(np.abs(_hues(view) - want).max())
    slip = transforms.simclr_view(orange, 16, _rng(seed))  # SLIP's defaults: hue 0.1, grayscale 0.2
    moved.append(np.abs(_hues(slip) - want).max() if slip.std(axis=-1).max() > 0 else 1.0)  # grey: no hue
  assert max(kept) < 0.04  # brightness, contrast, saturation keep the hue, but for clipping at 0 and 255
  assert sum(m > 0.05 for m in moved) >= 20  # about 0.8 x 3/4 jittered by more than 0.05 of a turn, plus greys


def test_dino_global_view_is_either_of_dinos_global_views_half_the_time():
  """One view per example meets DINO's first global view's augmentation (always blurred, never solarised) or the
  second's (blurred with p 0.1, solarised with p 0.2), each half the time (config.data.augment='dino')."""
  image, picks = _image(3), []
  for seed in range(60):
    reference_rng = _rng(seed)
    pick = int(reference_rng.integers(2))
    blur_p, solarize_p = ((1.0, 0.0), (0.1, 0.2))[pick]  # DINO's recipe (Caron et al. 2021), written out
    want = transforms.dino_augment(image, reference_rng, (0.4, 0.4, 0.2, 0.1), 0.2, blur_p, solarize_p)
    np.testing.assert_array_equal(transforms.dino_global_view(image, _rng(seed)), want)
    picks.append(pick)
  assert 15 <= sum(picks) <= 45
  # Observed through the pixels alone: a flat grey of 200 without colour jitter or grayscale is changed only by
  # solarisation (to 55), which only the second recipe applies: in 0.5 * 0.2 of the views.
  grey = np.full((8, 8, 3), 200, np.uint8)
  solarised = [transforms.dino_global_view(grey, _rng(seed), jitter=(0, 0, 0, 0), grayscale_p=0.0)[0, 0, 0] == 55
               for seed in range(1000)]
  assert 0.07 < np.mean(solarised) < 0.13


def test_random_background_keeps_the_objects_and_replaces_the_rest():
  image, mask = _image(0, 16, 20), np.zeros((16, 20), np.uint8)
  mask[4:10, 6:15] = 7  # one object
  first, again = transforms.random_background(image, mask, _rng(0)), transforms.random_background(image, mask, _rng(0))
  second = transforms.random_background(image, mask, _rng(1))
  np.testing.assert_array_equal(first, again)  # deterministic per generator state
  for out in (first, second):
    assert out.shape == image.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out[4:10, 6:15], image[4:10, 6:15])
  background = mask == 0
  assert not np.array_equal(first[background], image[background])
  assert not np.array_equal(first[background], second[background])
  # The new background does not depend on the old one: another image with the same objects gets the same pixels.
  other = _image(5, 16, 20)
  other[4:10, 6:15] = image[4:10, 6:15]
  np.testing.assert_array_equal(transforms.random_background(other, mask, _rng(0)), first)
  with pytest.raises(ValueError, match='the mask is 8x20 but the image is 16x20'):
    transforms.random_background(image, mask[:8], _rng(0))


# ------------------------------------------------------------------ the eval geometry: bounded, and each family's


def _png(height, width, seed=0):
  buffer = io.BytesIO()
  Image.fromarray(_image(seed, height, width)).save(buffer, format='PNG')
  return buffer.getvalue()


def _resize_then_crop(image, size, resample, offset=lambda margin: margin // 2):
  """The naive reference: the whole image resized (shorter side to `size`, the longer truncated), then the centre
  crop, as torchvision's Resize + CenterCrop and transformers' CLIP processor do it."""
  height, width = image.shape[:2]
  short = min(height, width)
  new_h, new_w = int(size * height / short), int(size * width / short)
  resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), resample))
  top, left = offset(new_h - size), offset(new_w - size)
  return resized[top:top + size, left:left + size]


class _ResizeSpy:
  """Records every PIL resize's output size and source box (the work PIL does is bounded by both)."""

  def __init__(self, monkeypatch):
    self.calls, original = [], Image.Image.resize

    def resize(image, size, *args, **kwargs):
      self.calls.append((tuple(size), kwargs.get('box')))
      return original(image, size, *args, **kwargs)
    monkeypatch.setattr(Image.Image, 'resize', resize)


def test_resize_of_a_6000x2_image_never_makes_a_large_intermediate(monkeypatch):
  data = _png(2, 6000)  # noise here; a flat 6000x2 PNG is about 120 bytes
  image = records.to_rgb(Image.open(io.BytesIO(data)))
  for picture in (image, image.transpose(1, 0, 2)):  # wide and tall
    spy = _ResizeSpy(monkeypatch)
    out = resize_image(picture, 224)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    # Resizing the whole image first would ask PIL for 672000x224 (151 megapixels). Each resize must produce at most
    # the output, and read a region no larger than the crop's: PIL's work is out_w x the region's rows.
    for (width, height), box in spy.calls:
      assert width * height <= 224 * 224
      assert box is not None and (box[2] - box[0]) <= 2 + 1e-9 and (box[3] - box[1]) <= 2 + 1e-9


@pytest.mark.parametrize('height,width', [(37, 91), (200, 61), (33, 64), (64, 33), (23, 23), (40, 41), (90, 23)])
@pytest.mark.parametrize('size', [16, 24, 32])
def test_resize_up_to_an_aspect_of_4_gives_the_pixels_of_resize_then_crop(height, width, size):
  image = _image(height + width, height, width)
  np.testing.assert_array_equal(resize_image(image, size), _resize_then_crop(image, size, Image.Resampling.BICUBIC))
  mask = image[..., 0] % 5
  np.testing.assert_array_equal(image_ops.resize_mask(mask, size),
                                _resize_then_crop(mask, size, Image.Resampling.NEAREST))
  # torchvision's CenterCrop rounds half the margin half to even (OpenAI CLIP, open_clip)
  torchvision_offset = lambda margin: int(round(margin / 2.0))  # noqa: E731
  np.testing.assert_array_equal(resize_image(image, size, crop_offset='round'),
                                _resize_then_crop(image, size, Image.Resampling.BICUBIC, torchvision_offset))


@pytest.mark.parametrize('height,width', [(301, 7), (9, 200), (500, 120)])
def test_resize_beyond_an_aspect_of_4_samples_the_same_region(height, width):
  # Only the crop's region is resampled there: the same sampling positions as resize-then-crop, with PIL free to
  # order its two rounded passes differently: on pure noise (the worst case: bicubic overshoots clipped at 0 or 255
  # in another pass) under half a level on average, and under 3% of values more than 2 levels apart.
  image = _image(height + width, height, width)
  difference = np.abs(resize_image(image, 32).astype(int) - _resize_then_crop(image, 32, Image.Resampling.BICUBIC))
  assert difference.mean() < 0.5 and (difference > 2).mean() < 0.03


def test_squash_resizes_both_sides_with_the_chosen_filter():
  image = _image(0, 37, 91)
  for resample, pil in (('bicubic', Image.Resampling.BICUBIC), ('bilinear', Image.Resampling.BILINEAR)):
    np.testing.assert_array_equal(resize_image(image, 24, 'squash', resample),
                                  np.asarray(Image.fromarray(image).resize((24, 24), pil)))


def test_preprocessing_normalises_with_its_own_mean_and_std():
  image = _image(0, 30, 50)
  siglip = image_ops.SIGLIP_PREPROCESSING(image, 16)
  want = np.asarray(Image.fromarray(image).resize((16, 16), Image.Resampling.BICUBIC)).astype(np.float64) / 127.5 - 1
  np.testing.assert_allclose(siglip, want, atol=1e-6)
  assert siglip.min() >= -1 and siglip.max() <= 1
  clip = image_ops.OPENAI_CLIP_PREPROCESSING(image, 16)
  np.testing.assert_array_equal(clip, image_ops.normalize_image(resize_image(image, 16)))
  np.testing.assert_array_equal(image_ops.denormalize_image(siglip, image_ops.SIGLIP_PREPROCESSING),
                                image_ops.SIGLIP_PREPROCESSING.resize_image(image, 16))


def test_model_configs_without_preprocessing_keep_openai_clips_and_bad_fields_are_named():
  assert image_ops.preprocessing_of({}) == image_ops.OPENAI_CLIP_PREPROCESSING
  assert image_ops.preprocessing_of({'preprocess': image_ops.SIGLIP_PREPROCESSING.config()}) == (
      image_ops.SIGLIP_PREPROCESSING)
  with pytest.raises(ValueError, match=r"model.preprocess.resize='stretch'.*'shorter_side_crop', 'squash'"):
    image_ops.preprocessing_of({'preprocess': {'resize': 'stretch'}})
  with pytest.raises(ValueError, match=r'model.preprocess has unknown fields \[.interpolation.\]'):
    image_ops.preprocessing_of({'preprocess': {'interpolation': 'bicubic'}})
  with pytest.raises(ValueError, match=r'model.preprocess.std=\(0.5, 0.0, 0.5\) .* each > 0'):
    image_ops.preprocessing_of({'preprocess': {'std': (0.5, 0.0, 0.5)}})


def test_absurd_aspect_ratios_are_bad_records_in_training():
  limit = records.MAX_ASPECT_RATIO
  with pytest.raises(records.BadRecordError, match='6000x2') as error:
    records.decode_image(_png(2, 6000), max_aspect_ratio=limit)
  assert error.value.reason == 'absurd_aspect' and 'absurd_aspect' in records.SKIP_REASONS
  with pytest.raises(records.BadRecordError) as error:
    records.decode_image(_png(300, 14), max_aspect_ratio=limit)
  assert error.value.reason == 'absurd_aspect'
  assert records.decode_image(_png(300, 15), max_aspect_ratio=limit).shape == (300, 15, 3)  # 20:1 is an image
  assert records.decode_image(_png(2, 6000)).shape == (2, 6000, 3)  # evaluation and embed take every image
  # The training pipeline replaces the record and counts the reason.
  good = synthetic.make_example(0, 'train', 'studio', 0, 16)
  spacer = {**synthetic.make_example(0, 'train', 'studio', 1, 16), 'image': _png(2, 6000)}
  source = grain.MapDataset.source([(0, records.serialize(spacer)), (0, records.serialize(good))])
  example = pipeline.LoadExamples(source, ['shard-0'])[0]
  assert example['record_error'] == 1 + records.SKIP_REASONS.index('absurd_aspect')
  assert example['key'] == good['key'] and '6000x2' in example['record_detail']
