"""config.data.augment_on='device' (data/image/device_augment.py): the views the train step renders from the host's
draws against the host's own views (transforms.py): view for view with the same draws, and as distributions over a few
hundred independent draws (two-sample tests that are shown to reject a wrong crop scale, flip rate or grayscale
rate)."""
import jax
import numpy as np
import pytest
import scipy.stats
from sklearn.datasets import load_sample_images

from vlp_jax.data.image import device_augment, transforms
from vlp_jax.data.image.image_ops import images_to_float

JITTER = (0.4, 0.4, 0.2, 0.1)
LOCAL_SCALE = (0.05, 0.4)
SIZE, SOURCE = 32, 64
DRAWS = 300
ALPHA = 1e-3  # a test rejects at p < ALPHA: each real comparison passes, each broken one fails
# Compiled, as in the train step (op by op, the blur's taps and the colour branches dispatch one at a time).
render_views = jax.jit(device_augment.render_views, static_argnums=2)


def _photo(height=64, width=96):
  """A natural photo, downsized to [height, width, 3] uint8 (not square: the boxes must undo the squash)."""
  from PIL import Image
  return np.asarray(Image.fromarray(load_sample_images().images[0]).resize((width, height), Image.BICUBIC))


def _coordinates(height=64, width=96):
  """[height, width, 3] uint8 whose red is the column and green the row (as fractions of 255), blue flat: a view's
  crop box and flip can be read back from its pixels."""
  x = (np.arange(width) + 0.5) / width * 255
  y = (np.arange(height) + 0.5) / height * 255
  image = np.zeros((height, width, 3))
  image[..., 0], image[..., 1], image[..., 2] = x[None, :], y[:, None], 128
  return np.rint(image).astype(np.uint8)


def _geometry(views, height=64, width=96):
  """[n, s, s, 3] views of `_coordinates` -> (crop area fraction, log aspect ratio w/h in pixels, flipped) [n] each,
  from the gradients between a quarter and three quarters of the view (clear of the blur's edges)."""
  s = views.shape[1]
  views = views.astype(np.float64)
  dx = (views[:, :, 3 * s // 4, 0] - views[:, :, s // 4, 0]).mean(1) / (s // 2) * s / 255  # width fraction, signed
  dy = (views[:, 3 * s // 4, :, 1] - views[:, s // 4, :, 1]).mean(1) / (s // 2) * s / 255
  return np.abs(dx * dy), np.log(np.abs(dx) * width / (dy * height)), dx < 0


def _colour(views):
  """[n, s, s, 3] -> [n, 7]: per-channel means and standard deviations, and the mean channel spread (0: grey)."""
  views = views.astype(np.float64)
  return np.concatenate([views.mean((1, 2)), views.std((1, 2)), np.ptp(views, axis=-1).mean((1, 2))[:, None]], 1)


def _host_views(image, seeds, jitter, grayscale_p):
  out = []
  for seed in seeds:
    rng = np.random.default_rng(seed)
    crop = transforms.random_resized_crop(image, SIZE, LOCAL_SCALE, rng)
    out.append(transforms.dino_augment(crop, rng, jitter, grayscale_p, 0.5, 0.0))
  return np.stack(out)


def _device_params(image, seeds, jitter, grayscale_p, scale=LOCAL_SCALE):
  return np.stack([device_augment.dino_view_params(*image.shape[:2], scale, np.random.default_rng(seed), jitter,
                                                   grayscale_p, 0.5, 0.0) for seed in seeds])


def _render(image, params):
  source = device_augment.source_image(image, SOURCE)
  return np.asarray(render_views(source[None], params[None], SIZE))[0]


def test_the_parameters_are_drawn_as_the_host_draws_its_views():
  """Same generator state: the device parameters take the host view's draws, no more, no fewer (what follows, e.g.
  the text crops, is unchanged), and the rendered view is the host's up to resampling."""
  image = _photo()
  diffs = []
  for seed in range(12):
    host_rng, device_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    host = transforms.dino_augment(transforms.random_resized_crop(image, SIZE, (0.4, 1.0), host_rng), host_rng,
                                   JITTER, 0.2, 0.1, 0.2)
    params = device_augment.dino_view_params(*image.shape[:2], (0.4, 1.0), device_rng, JITTER, 0.2, 0.1, 0.2)
    assert host_rng.random() == device_rng.random()
    view = np.asarray(render_views(image[None], params[None, None], SIZE))[0, 0]
    diffs.append(np.abs(view.astype(float) - host).mean())
  # Mean absolute difference in levels (the source is the image itself here): the two cubic resamplers and the
  # rounding between PIL's passes. A wrong flip, crop or colour op is tens of levels.
  assert np.median(diffs) < 2.0 and max(diffs) < 6.0, diffs
  host_rng, device_rng = np.random.default_rng(0), np.random.default_rng(0)
  transforms.simclr_view(image, SIZE, host_rng)
  device_augment.simclr_view_params(*image.shape[:2], device_rng, (0.08, 1.0), (0.4, 0.4, 0.4, 0.1), 0.2)
  assert host_rng.random() == device_rng.random()


def _geometry_pvalues(host, device):
  host_area, host_aspect, host_flip = _geometry(host)
  area, aspect, flip = _geometry(device)
  flips = [[host_flip.sum(), (~host_flip).sum()], [flip.sum(), (~flip).sum()]]
  return {'area': scipy.stats.ks_2samp(host_area, area).pvalue,
          'aspect': scipy.stats.ks_2samp(host_aspect, aspect).pvalue,
          'flip': scipy.stats.fisher_exact(flips).pvalue}


def test_crop_boxes_and_flips_have_the_host_distribution():
  """Geometry (no colour augmentation): crop area fraction and aspect ratio (two-sample Kolmogorov-Smirnov) and
  flip rate (Fisher's exact test) of DRAWS host views against DRAWS device views from other seeds; the same tests
  reject a device scale range of (0.05, 0.3) and a flip rate of 1/4."""
  image = _coordinates()
  no_colour = (0.0, 0.0, 0.0, 0.0)
  host = _host_views(image, range(DRAWS), no_colour, 0.0)
  seeds = range(DRAWS, 2 * DRAWS)
  params = _device_params(image, seeds, no_colour, 0.0)
  pvalues = _geometry_pvalues(host, _render(image, params))
  assert min(pvalues.values()) > ALPHA, pvalues
  narrow = _geometry_pvalues(host, _render(image, _device_params(image, seeds, no_colour, 0.0, (0.05, 0.3))))
  assert narrow['area'] < ALPHA, narrow
  rare_flips = params.copy()
  rare_flips[::2, device_augment.FIELDS.index('flip')] = 0.0
  assert _geometry_pvalues(host, _render(image, rare_flips))['flip'] < ALPHA


def _colour_pvalues(host, device):
  host_stats, stats = _colour(host), _colour(device)
  return [scipy.stats.ks_2samp(host_stats[:, k], stats[:, k]).pvalue for k in range(host_stats.shape[1])]


def test_colour_statistics_have_the_host_distribution():
  """COSMOS's local-crop augmentation of a photo: per-view channel means, standard deviations and channel spread
  (KS, Bonferroni over the 7 statistics); the same test rejects a grayscale rate of 0.5 for 0.2."""
  image = _photo()
  host = _host_views(image, range(DRAWS), JITTER, 0.2)
  seeds = range(DRAWS, 2 * DRAWS)
  pvalues = _colour_pvalues(host, _render(image, _device_params(image, seeds, JITTER, 0.2)))
  assert min(pvalues) > ALPHA / len(pvalues), pvalues
  grey = _colour_pvalues(host, _render(image, _device_params(image, seeds, JITTER, 0.5)))
  assert min(grey) < ALPHA / len(grey), grey


def test_render_batch_replaces_the_source_and_parameters_by_the_views():
  image = _photo()
  params = _device_params(image, range(6), JITTER, 0.2).reshape(2, 3, -1)
  source = np.stack([device_augment.source_image(image, SOURCE)] * 2)
  batch = {device_augment.SOURCE_KEY: source, 'crops_params': params, 'text': np.zeros((2, 4), np.int32)}
  out = jax.jit(lambda b: device_augment.render_batch(b, {'crops': SIZE}))(batch)  # as in the step
  assert sorted(out) == ['crops', 'text'] and out['crops'].shape == (2, 3, SIZE, SIZE, 3)
  np.testing.assert_array_equal(np.asarray(out['crops'][1, 2]), _render(image, params[1, 2:3])[0])
  assert images_to_float(out)['crops'].dtype == np.float32
  assert device_augment.render_batch(batch, {}) is batch
  with pytest.raises(KeyError, match=r"augment_on='device'.*\['other_params'\]"):
    device_augment.render_batch(batch, {'other': SIZE})
