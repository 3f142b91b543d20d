"""ZeroVL: the coin-flipping mixup loss against a naive numpy reference from the appendix (values and gradients),
its reduction to InfoNCE, sharding; the objective's mixing of images and text embeddings; text augmentation; and a
short training run with single-source batches; the paper's settings in configs/zerovl_multisource.py."""
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from vlp_jax import evalsets, models, objectives, parallel
from vlp_jax.config import ConfigError, from_file, validate
from vlp_jax.data.image import autoaugment, transforms
from vlp_jax.data.text import text_augment as text_lib
from vlp_jax.data.image.image_ops import resize_image
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.evalsets.base import LoadRequest
from vlp_jax.losses.contrastive import clip_infonce, l2_normalize
from vlp_jax.losses.mixup import mixup_infonce

from support import numeric_grad, unit_vectors
from support import assert_trained_params_close, initial_state, jit_init, run_steps

MULTISOURCE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'configs', 'zerovl_multisource.py')


def naive_mixup_loss(zi, zt, t, lam):
  """Appendix A.3, loop by loop: sample j's targets are pair j (weight lam) and pair N-1-j (weight 1 - lam).

  I2T: softmax of zi_j over all texts; T2I: softmax of zt_j over all images. The two directions are averaged.
  """
  n, s = len(zi), np.exp(t)
  i2t = t2i = 0.0
  for j in range(n):
    rows = s * np.array([zi[j] @ zt[k] for k in range(n)])
    cols = s * np.array([zt[j] @ zi[k] for k in range(n)])
    for logits, total in ((rows, 'i2t'), (cols, 't2i')):
      logp = logits - np.log(np.sum(np.exp(logits)))
      term = -(lam * logp[j] + (1 - lam) * logp[n - 1 - j]) / n
      if total == 'i2t':
        i2t += term
      else:
        t2i += term
  return (i2t + t2i) / 2


@pytest.mark.parametrize('lam', [0.3, 0.93])
def test_mixup_loss_matches_the_appendix_values_and_gradients(lam):
  rng = np.random.default_rng(0)
  # odd: the middle pair is its own reversed partner
  zi, zt, t = unit_vectors(rng, (7, 5)), unit_vectors(rng, (7, 5)), 1.7
  f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
  loss, metrics = mixup_infonce(f32(zi), f32(zt), f32(t), f32(lam))
  np.testing.assert_allclose(loss, naive_mixup_loss(zi, zt, t, lam), rtol=1e-5)
  grads = jax.grad(lambda a, b, c: mixup_infonce(a, b, c, f32(lam))[0], argnums=(0, 1, 2))(f32(zi), f32(zt), f32(t))
  for index, got in enumerate(grads):  # zi, zt and the learnable log scale
    want = numeric_grad(lambda a, b, c: naive_mixup_loss(a, b, c, lam), [zi, zt, t], index)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(metrics['logit_scale'], np.exp(t), rtol=1e-6)


def test_lambda_one_is_infonce():
  rng = np.random.default_rng(1)
  zi, zt = unit_vectors(rng, (8, 6)).astype(np.float32), unit_vectors(rng, (8, 6)).astype(np.float32)
  fn = lambda loss: jax.value_and_grad(lambda a, b, c: loss(a, b, c)[0], argnums=(0, 1, 2))  # noqa: E731
  got = fn(lambda a, b, c: mixup_infonce(a, b, c, jnp.float32(1.0)))(zi, zt, jnp.float32(2.0))
  want = fn(clip_infonce)(zi, zt, jnp.float32(2.0))
  chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-7)


def test_sharded_equals_single_device_without_a_full_logit_matrix():
  rng = np.random.default_rng(2)
  zi, zt = unit_vectors(rng, (32, 8)).astype(np.float32), unit_vectors(rng, (32, 8)).astype(np.float32)
  fn = jax.value_and_grad(lambda a, b, s: mixup_infonce(a, b, s, jnp.float32(0.35))[0], argnums=(0, 1, 2))
  want = jax.jit(fn)(zi, zt, jnp.float32(1.3))
  mesh = parallel.make_mesh(fsdp=2)
  rows = NamedSharding(mesh, P(parallel.BATCH_AXES))
  with jax.set_mesh(mesh):
    sharded = (jax.device_put(zi, rows), jax.device_put(zt, rows), jnp.float32(1.3))
    got = jax.jit(fn)(*sharded)
    hlo = jax.jit(fn).lower(*sharded).compile().as_text()
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)
  assert 'f32[4,32]' in hlo and 'f32[32,32]' not in hlo  # each device holds 4 x 32 rows of the logits


def _zerovl_objective(config, **options):
  """The ZeroVL objective of `config` with `options`, without its variables (drawing lambda and the coin needs none)."""
  config.objective.name = 'zerovl'
  config.objective.update(options)
  return objectives.build(config, models.build_model(config.model))


def _zerovl(config, **options):
  """(objective, params, state, batch): the variables from a jitted init (an eager one compiles op by op), and 8 random
  examples."""
  objective = _zerovl_objective(config, **options)
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  rng = np.random.default_rng(0)
  size, length = config.model.vision.image_size, config.model.text.context_length
  text = rng.integers(1, 49000, (8, length)).astype(np.int32)
  text[:, 0], text[:, 6] = 49406, 49407
  batch = {'image': rng.normal(size=(8, size, size, 3)).astype(np.float32), 'text': text}
  return objective, params, state, batch


def _rng_with_coin(objective, heads):
  """A step rng whose coin lands as asked, with lam well inside (0, 1) so that the mix is visible."""
  rngs = jax.random.split(jax.random.key(0), 64)
  lams, coins = jax.jit(jax.vmap(objective.draw_mixup))(rngs)
  good = np.flatnonzero((np.asarray(coins) == heads) & (np.asarray(lams) > 0.2) & (np.asarray(lams) < 0.8))
  assert len(good), 'no such rng in 64'
  return rngs[good[0]], float(lams[good[0]])


@pytest.mark.slow
@pytest.mark.parametrize('heads', [True, False])
def test_features_mix_images_or_text_embeddings(micro, heads):
  objective, params, state, batch = _zerovl(micro, mixup_alpha=2.0)  # lam mostly inside (0, 1)
  rng, lam = _rng_with_coin(objective, heads)
  features_fn = objective.forward
  encode_image = lambda x: objective.encode_image(params, state, x, False)[0]['embed']  # noqa: E731
  features, _ = features_fn(params, state, batch, rng)
  again, _ = features_fn(params, state, batch, rng)
  chex.assert_trees_all_equal(features, again)  # deterministic for a given rng
  image = encode_image(batch['image'])
  text = objective.encode_text(params, batch['text'])['embed']
  if heads:  # pixels mixed with the reversed batch before the image tower; texts untouched
    mixed = lam * batch['image'] + (1 - lam) * batch['image'][::-1]
    want_zi = l2_normalize(encode_image(mixed))
    want_zt = l2_normalize(text)
  else:  # text embeddings mixed after the projection, before the norm; images untouched
    want_zi = l2_normalize(image)
    want_zt = l2_normalize(lam * text + (1 - lam) * text[::-1])
    after_norm = l2_normalize(lam * l2_normalize(text) + (1 - lam) * l2_normalize(text)[::-1])
    assert not np.allclose(features['zt'], after_norm, atol=1e-4)
  np.testing.assert_allclose(features['zi'], want_zi, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(features['zt'], want_zt, rtol=1e-5, atol=1e-5)
  assert not np.allclose(features['zi' if heads else 'zt'], l2_normalize(image if heads else text), atol=1e-3)
  np.testing.assert_allclose(features['mixup_lambda'], lam)
  np.testing.assert_array_equal(features['mixup_coin'], float(heads))
  loss, metrics = objective.loss(features, params, jnp.int32(0))
  np.testing.assert_allclose(loss, mixup_infonce(want_zi, want_zt, params['logit_scale'], lam)[0], rtol=1e-5)
  assert {'mixup_loss', 'mixup_lambda', 'mixup_coin'} <= set(metrics)
  # Evaluation (train=False) and mixup=False see the plain CLIP features.
  plain, _ = features_fn(params, state, batch, rng, train=False)
  np.testing.assert_allclose(plain['zi'], l2_normalize(image), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(plain['mixup_lambda'], 1.0)


@pytest.mark.slow
@pytest.mark.parametrize('modality, want_heads', [('image', True), ('text', False)])
def test_mixup_modality_fixes_the_coin_and_keeps_lambda(micro, modality, want_heads):
  coin = _zerovl_objective(micro.copy_and_resolve_references(), mixup_modality='coin')
  fixed = _zerovl_objective(micro, mixup_modality=modality)
  rngs = jax.random.split(jax.random.key(1), 32)
  coin_lams, coins = jax.vmap(coin.draw_mixup)(rngs)
  lams, heads = jax.vmap(fixed.draw_mixup)(rngs)
  assert 0 < int(np.sum(coins)) < 32  # the paper's coin lands both ways
  np.testing.assert_array_equal(heads, want_heads)
  np.testing.assert_array_equal(lams, coin_lams)  # only the coin is fixed, lam is the same draw
  micro.objective.mixup_modality = 'both'
  with pytest.raises(ValueError, match=r"config.objective.mixup_modality='both'.*'coin', 'image', 'text'"):
    objectives.build(micro, None)


@pytest.mark.slow
@pytest.mark.parametrize('heads', [True, False])
def test_targets_only_mixes_nothing_and_keeps_the_two_target_loss(micro, heads):
  mixed = _zerovl_objective(micro.copy_and_resolve_references(), mixup_alpha=2.0)
  objective, params, state, batch = _zerovl(micro, mixup_alpha=2.0, mixup_modality='targets_only')
  rng, lam = _rng_with_coin(mixed, heads)
  features, _ = objective.forward(params, state, batch, rng)
  plain, _ = objective.forward(params, state, batch, rng, train=False)
  np.testing.assert_allclose(features['zi'], plain['zi'], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(features['zt'], plain['zt'], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(features['mixup_lambda'], max(lam, 1 - lam))  # the pair keeps the larger weight
  loss, _ = objective.loss(features, params, jnp.int32(0))
  want = mixup_infonce(plain['zi'], plain['zt'], params['logit_scale'], max(lam, 1 - lam))[0]
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert abs(float(loss) - float(clip_infonce(plain['zi'], plain['zt'], params['logit_scale'])[0])) > 1e-4


@pytest.mark.slow
def test_fixed_temperature_is_constant(micro):
  objective, params, state, batch = _zerovl(micro, fixed_temperature=0.02, mixup=False)
  features, _ = objective.forward(params, state, batch, jax.random.key(0))
  loss_fn = lambda p: objective.loss(features, p, jnp.int32(0))  # noqa: E731
  loss, metrics = loss_fn(params)
  np.testing.assert_allclose(metrics['logit_scale'], 50.0, rtol=1e-5)
  np.testing.assert_allclose(loss, clip_infonce(features['zi'], features['zt'], jnp.log(50.0))[0], rtol=1e-6)
  assert float(jax.grad(lambda p: loss_fn(p)[0])(params)['logit_scale']) == 0.0


def test_views_augment_the_caption_words_when_on(micro):
  micro.objective.name = 'zerovl'
  caption = 'an unbelievably large red-circle, on gray'
  example = {'image': np.zeros((20, 20, 3), np.uint8), 'caption': caption, 'label': 3}
  micro.objective.text_augment = False
  plain = objectives.OBJECTIVES.get('zerovl').views(micro).random_map(example, np.random.default_rng(0))
  np.testing.assert_array_equal(plain['text'], default_tokenizer()(caption, context_length=16)[0])
  micro.objective.update(text_augment=True, text_augment_prob=1.0, text_mask_prob=1.0, text_replace_prob=0.0,
                         text_delete_prob=0.0)
  masked = objectives.OBJECTIVES.get('zerovl').views(micro).random_map(example, np.random.default_rng(0))
  words = caption.split()  # 6 words, 9 BPE pieces: each word, not each piece, becomes one mask
  want = [text_lib.SOT_TOKEN] + [text_lib.MASK_TOKEN] * len(words) + [text_lib.EOT_TOKEN]
  np.testing.assert_array_equal(masked['text'], want + [0] * (16 - len(want)))
  np.testing.assert_array_equal(masked['image'], plain['image'])


def _example(seed=0):
  rng = np.random.default_rng(seed)
  return {'image': rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), 'caption': 'a red circle', 'label': 3}


def test_multisource_config_has_the_papers_image_augmentation(micro):
  """A.9: RandomResizedCrop (area 60-100%, aspect 3/4-4/3) then AutoAugment (ImageNet policy), on the training view;
  the eval images stay resized and centre-cropped."""
  config = from_file(MULTISOURCE)
  validate(config)
  assert tuple(config.data.crop_scale) == (0.6, 1.0) and config.data.augment == 'autoaugment'
  views = objectives.OBJECTIVES.get('zerovl').views(config)
  assert tuple(views.crop_scale) == (0.6, 1.0) and views.augment == 'autoaugment'
  size = config.model.vision.image_size
  example = _example()
  got = views.random_map(example, np.random.default_rng(5))['image']
  rng = np.random.default_rng(5)  # the same draws, in the views' order: the crop, then AutoAugment
  want = autoaugment.auto_augment(transforms.random_resized_crop(example['image'], size, (0.6, 1.0), rng), rng)
  np.testing.assert_array_equal(got, want)
  assert got.shape == (size, size, 3) and got.dtype == np.uint8
  assert not np.array_equal(got, resize_image(example['image'], size))  # not the un-augmented view
  assert not np.array_equal(got, views.random_map(example, np.random.default_rng(6))['image'])
  # Evaluation never sees the training views: the same eval images with and without the augmentation.
  plain = evalsets.EVAL_SETS.get('synthetic')('synthetic', LoadRequest(micro.data, 'test', 16)).images
  micro.data.update(crop_scale=(0.6, 1.0), augment='autoaugment')
  augmented = evalsets.EVAL_SETS.get('synthetic')('synthetic', LoadRequest(micro.data, 'test', 16)).images
  np.testing.assert_array_equal(augmented, plain)


def test_multisource_config_has_the_papers_trainable_temperature(micro):
  """A.9: "the trainable temperature of contrastive loss is initialized to 0.02": the logit scale starts at log 50
  and gets a gradient (the towers here are the micro ones, to keep the test small)."""
  config = from_file(MULTISOURCE)
  assert config.objective.fixed_temperature == 0.0
  np.testing.assert_allclose(config.model.init_logit_scale, np.log(50.0), rtol=1e-12)
  micro.model.init_logit_scale = config.model.init_logit_scale
  objective, params, state, batch = _zerovl(micro, **config.objective.to_dict())
  np.testing.assert_allclose(params['logit_scale'], np.log(50.0), rtol=1e-6)
  features, _ = objective.forward(params, state, batch, jax.random.key(0))
  grad = jax.grad(lambda p: objective.loss(features, p, jnp.int32(0))[0])(params)['logit_scale']
  assert abs(float(grad)) > 1e-6
  assert config.objective.mixup_alpha == 0.1 and config.data.mixing == 'single_source'
  assert (config.objective.text_augment_prob, config.objective.text_mask_prob, config.objective.text_replace_prob,
          config.objective.text_delete_prob) == (0.2, 0.5, 0.1, 0.4)


def test_options_are_validated(micro):
  micro.objective.name = 'zerovl'
  micro.objective.text_delete_prob = 0.5
  with pytest.raises(ValueError, match='text_mask_prob.*sum to 1'):
    objectives.OBJECTIVES.get('zerovl').views(micro)
  micro.objective.update(text_delete_prob=0.4, mixup_alpha=0.0)
  with pytest.raises(ValueError, match='config.objective.mixup_alpha'):
    objectives.build(micro, None)
  micro.objective.mixup_alpha = 0.1
  micro.data.mixing = 'debiased'
  with pytest.raises(ConfigError, match=r"config.data.mixing='debiased'.*'single_source', 'sequential'"):
    validate(micro)


@pytest.mark.slow
def test_trains_identically_on_eight_devices_and_one(micro):
  micro.objective.name = 'zerovl'
  micro.objective.mixup_alpha = 1.0
  initial = initial_state(micro)  # one init (on the host) for both meshes
  want_params, want_losses, _ = run_steps(micro, parallel.make_mesh(1, jax.devices()[:1]), steps=2, state=initial)
  got_params, got_losses, _ = run_steps(micro, parallel.make_mesh(2), steps=2, state=initial)
  np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
  assert_trained_params_close(got_params, want_params)
