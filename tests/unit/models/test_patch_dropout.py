"""FLIP's patch dropout in the ViT tower (`config.model.vision.patch_dropout`, models/vit.py): in training each image
keeps its class token and K = max(1, int(N (1 - p))) of its N patches, a uniformly random subset drawn from its own
key, in their original order; evaluation is untouched, p = 0 is the old graph, an image's result does not depend on
the other images of the call, and decoupled accumulation stays exact."""
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import accumulated_loss_and_grads, assert_close_at_scale, objective_batch
from vlp_jax import models, objectives, parallel
from vlp_jax.config import ConfigError, base_config, validate, with_current_defaults
from vlp_jax.models.vit import PATCH_DROPOUT_SITE, kept_patch_count, kept_patch_indices
from vlp_jax.objectives.base import example_rngs

RATE = 0.5
GRID = 4  # the tiny preset: 32 px images in 8 px patches
N = GRID * GRID
K = kept_patch_count(N, RATE)  # 8
WIDTH = 32  # the tiny preset narrowed and made shallower (2 blocks: a last one and one before it): compiles faster


def _model(rate: float):
  vision = dict(models.preset('tiny').vision, patch_dropout=rate, width=WIDTH, layers=2, heads=2)
  text = dict(models.preset('tiny').text, width=WIDTH, layers=1, heads=2)
  return models.build_model(models.preset('tiny', embed_dim=WIDTH, vision=vision, text=text))


@pytest.fixture(scope='module')
def towers():
  """(encode(rate, images, train, rng, with_tokens) -> the image tower's outputs, params): the tiny preset at
  patch_dropout `rate`, all rates with the same parameters (the option adds none)."""
  params = models.init_variables(_model(RATE), jax.random.key(0))[0]
  chex.assert_trees_all_equal_shapes(params, jax.eval_shape(lambda: models.init_variables(_model(0.0),
                                                                                          jax.random.key(0))[0]))
  compiled = {}

  def encode(rate, images, train, rng=None, with_tokens=True):
    if (rate, train, with_tokens) not in compiled:
      model = _model(rate)
      compiled[rate, train, with_tokens] = jax.jit(lambda x, r: model.apply(
          {'params': params}, x, train, with_tokens, r, method=model.encode_image))
    return compiled[rate, train, with_tokens](jnp.asarray(images), rng)
  return encode, params


def _images(batch: int, side: int = 32, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).normal(size=(batch, side, side, 3)).astype(np.float32)


def _keys(batch: int, seed: int = 1) -> jax.Array:
  return example_rngs(jax.random.key(seed), batch)


def test_kept_count_follows_open_clips_rule():
  assert [kept_patch_count(16, p) for p in (0.0, 0.3, 0.5, 0.75, 0.99)] == [16, 11, 8, 4, 1]
  assert kept_patch_count(49, 0.5) == 24 and kept_patch_count(1, 0.9) == 1  # int() floors; at least one patch


@pytest.mark.slow
def test_training_keeps_one_plus_k_tokens_and_eval_all(towers):
  encode, _ = towers
  images, keys = _images(6), _keys(6)
  train = encode(RATE, images, True, keys)
  chex.assert_shape(train['tokens'], (6, K, WIDTH))  # the transformer saw [cls] + K tokens
  chex.assert_shape([train['embed'], train['cls']], [(6, WIDTH), (6, WIDTH)])
  chex.assert_shape(encode(RATE, images, False, keys)['tokens'], (6, N, WIDTH))  # eval: every patch
  chex.assert_shape(encode(RATE, images, True, None)['tokens'], (6, N, WIDTH))  # no keys: nothing dropped
  # Crops of another size (multi-crop; resized positional embeddings): K from their own grid.
  chex.assert_shape(encode(RATE, _images(2, side=48), True, keys[:2])['tokens'], (2, 18, WIDTH))  # 36 patches
  chex.assert_shape(encode(RATE, _images(2, side=16), True, keys[:2])['tokens'], (2, 2, WIDTH))  # 4 patches
  # The pooled path (the last block on [cls] alone) keeps the class token: the same embedding.
  pooled = encode(RATE, images, True, keys, with_tokens=False)
  assert 'tokens' not in pooled
  np.testing.assert_allclose(pooled['embed'], train['embed'], atol=2e-5)


def test_eval_is_bit_identical_to_no_patch_dropout(towers):
  encode, _ = towers
  images, keys = _images(6), _keys(6)
  want = encode(0.0, images, False)
  chex.assert_trees_all_equal(encode(RATE, images, False), want)
  chex.assert_trees_all_equal(encode(RATE, images, False, keys), want)  # keys given at eval change nothing


@pytest.mark.slow
def test_an_images_kept_patches_come_from_its_key_alone(towers):
  encode, _ = towers
  images, keys = _images(8), _keys(8)
  first = encode(RATE, images, True, keys)
  chex.assert_trees_all_equal(encode(RATE, images, True, keys), first)  # a function of the keys
  for rows in (np.arange(4), np.arange(8)[::-1], np.array([5]), np.array([6, 2, 2, 0])):  # 3 batch sizes compiled
    alone = encode(RATE, images[rows], True, keys[rows])
    chex.assert_trees_all_close(alone, jax.tree.map(lambda x: x[rows], first), atol=2e-5)
  # ... and not from its row: the same images under the next step's keys drop other patches.
  other = encode(RATE, images, True, _keys(8, seed=2))
  assert np.abs(np.asarray(other['embed']) - np.asarray(first['embed'])).max(axis=1).min() > 1e-3


def test_kept_patches_are_a_uniform_random_sorted_subset():
  keys = _keys(1000)
  kept = np.asarray(kept_patch_indices(keys, 49, RATE))  # ViT-B/32's grid
  assert kept.shape == (1000, 24) and kept.dtype == np.int32
  assert (np.diff(kept, axis=1) > 0).all() and kept.min() >= 0 and kept.max() < 49  # distinct, ascending, in range
  assert len({tuple(row) for row in kept}) == 1000  # every key its own subset
  np.testing.assert_allclose(np.bincount(kept.ravel(), minlength=49) / 1000, 24 / 49, atol=0.08)  # each ~equally
  # The reference recipe, one key at a time without vmap: the site folded into the image's key, a permutation's head.
  for i in (0, 7, 999):
    want = np.sort(np.asarray(jax.random.permutation(jax.random.fold_in(keys[i], PATCH_DROPOUT_SITE), 49))[:24])
    np.testing.assert_array_equal(kept[i], want)


@pytest.mark.slow
def test_training_output_is_the_full_model_on_the_gathered_tokens(towers):
  """The p = 0 model, with the tokens entering `ln_pre` replaced by the class token and the reference's kept
  patches (a numpy gather), gives the p = 0.5 model's training output: the class token is kept and first, the kept
  patches are the drawn ones in their order, and nothing else changes."""
  encode, params = towers
  images, keys = _images(4), _keys(4)
  kept = np.stack([np.sort(np.asarray(jax.random.permutation(jax.random.fold_in(key, PATCH_DROPOUT_SITE), N))[:K])
                   for key in keys])  # [4, K]
  rows = np.concatenate([np.zeros((4, 1), int), 1 + kept], axis=1)  # [4, 1 + K]: the class token, then the patches
  seen = {}

  def gather_before_ln_pre(next_fun, args, kwargs, context):
    if context.module.name == 'ln_pre' and context.method_name == '__call__':
      full = np.asarray(args[0])  # [4, 1 + N, w]: class token and patches with their positional embeddings
      seen['full'] = full
      args = (jnp.asarray(np.take_along_axis(full, rows[:, :, None], axis=1)), *args[1:])
    return next_fun(*args, **kwargs)

  model = _model(0.0)
  with nn.intercept_methods(gather_before_ln_pre):
    want = model.apply({'params': params}, jnp.asarray(images), False, True, None, method=model.encode_image)
  assert seen['full'].shape == (4, 1 + N, WIDTH)
  got = encode(RATE, images, True, keys)
  chex.assert_trees_all_close(got, want, atol=1e-5)
  # Not vacuous: the first K patches (no draw) give another result.
  assert not np.allclose(kept, np.arange(K)[None])
  assert np.abs(np.asarray(got['tokens']) - np.asarray(encode(0.0, images, False)['tokens'][:, :K])).max() > 1e-3


def _random_primitives(fn, *args) -> set[str]:
  text = str(jax.make_jaxpr(fn)(*args))
  return {name for name in ('random_bits', 'random_fold_in', 'random_split', 'threefry2x32') if name in text}


def test_zero_rate_is_the_old_deterministic_path(towers):
  encode, params = towers
  images, keys = _images(4), _keys(4)
  plain = encode(0.0, images, True, None)
  chex.assert_trees_all_equal(encode(0.0, images, True, keys), plain)  # the keys change nothing, bit for bit
  chex.assert_trees_all_equal(encode(0.0, images, False), plain)
  chex.assert_shape(plain['tokens'], (4, N, WIDTH))

  def trace(rate):
    model = _model(rate)
    return _random_primitives(lambda x, r: model.apply({'params': params}, x, True, True, r,
                                                       method=model.encode_image), jnp.asarray(images), keys)
  assert trace(0.0) == set()  # no key is touched at p = 0 ...
  assert trace(RATE)  # ... while p > 0 draws from them


def test_config_validation_and_old_configs():
  config = base_config()
  assert config.model.vision.patch_dropout == 0.0
  assert models.preset('ViT-B-16').vision.patch_dropout == 0.0 and models.preset('RN50').vision.patch_dropout == 0.0
  config.model.vision.patch_dropout = 0.5
  validate(config)
  for bad in (-0.1, 1.0, 1.5, float('nan')):
    config.model.vision.patch_dropout = bad
    with pytest.raises(ConfigError, match=r'model\.vision\.patch_dropout'):
      validate(config)
  resnet = base_config()
  resnet.model = models.preset('RN50')
  validate(resnet)
  resnet.model.vision.patch_dropout = 0.5
  with pytest.raises(ConfigError, match=r'model\.vision\.patch_dropout.*patch-based towers only \(vit, siglip_vit\)'):
    validate(resnet)
  # A config saved before the option reads as p = 0, and its model builds.
  saved = base_config().to_dict()
  del saved['model']['vision']['patch_dropout']
  assert with_current_defaults(saved).model.vision.patch_dropout == 0.0
  assert models.complete(saved['model']).vision.patch_dropout == 0.0
  old = models.preset('tiny')
  del old.vision['patch_dropout']
  assert models.build_model(old).vision.patch_dropout == 0.0  # the tower's default fills the missing key
  jax.eval_shape(lambda: models.init_variables(models.build_model(old), jax.random.key(0)))  # builds at p = 0


# ---------------------------------------------------------------- decoupled accumulation (as test_accumulation.py)

BATCH = 32


@pytest.mark.slow
def test_decoupled_accumulation_is_exact_with_patch_dropout(micro):
  """Micro config (16 patches, 8 kept), CLIP, 4 micro-batches of 8 rows (1 per device on 8): each row keeps its
  key, so both passes drop the whole batch's patches, and the loss and gradient are the whole batch's."""
  micro.model.vision.patch_dropout = RATE
  micro.accumulation.update(mode='decoupled', micro_batch_size=BATCH // 4)
  micro.batch_size = BATCH
  validate(micro)
  objective = objectives.build(micro, models.build_model(micro.model))
  params, state = objective.init_variables(jax.random.key(0))
  batch, mesh, rng = objective_batch(micro, BATCH), parallel.make_mesh(), jax.random.key(3)
  loss, metrics, _, grads = accumulated_loss_and_grads(objective, params, state, batch, rng, 'none', 1, mesh)
  d_loss, d_metrics, _, d_grads = accumulated_loss_and_grads(objective, params, state, batch, rng, 'decoupled', 4, mesh)
  np.testing.assert_allclose(d_loss, loss, rtol=1e-5)
  chex.assert_trees_all_close(d_metrics, metrics, rtol=1e-5, atol=1e-6)
  assert_close_at_scale(d_grads, grads)
  # Patch dropout is on in the step: another step rng drops other patches, another loss.
  other, *_ = accumulated_loss_and_grads(objective, params, state, batch, jax.random.key(4), 'none', 1, mesh)
  assert abs(float(other) - float(loss)) > 1e-4
