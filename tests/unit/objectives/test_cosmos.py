"""COSMOS: the loss against a naive numpy reference, the EMA teacher, the zero-initialised cross-attention special
case, multi-crop views, and training identically on 8 devices and on 1."""
import colorsys
import os

import pytest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from support import ROOT, assert_trained_params_close, initial_state, jit_init

from vlp_jax import models, objectives, parallel
from vlp_jax.config import ConfigError, from_file, validate, with_term
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.loading.pipeline import DecodeRecord
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.data.storage import records
from vlp_jax.data.text.text_crops import split_sentences
from vlp_jax.losses import affinity_consistency as saco
from vlp_jax.objectives.base import ema_update
from vlp_jax.objectives.cosmos import tower_params
from vlp_jax.training import optim
from vlp_jax.training.step import compile_train_step


def _cosmos(config, zero_init=False):
  config.objective.name = 'cosmos'
  config.objective.num_local_crops = 2
  config.objective.num_local_texts = 2
  config.objective.local_crop_size = 8
  config.objective.local_text_context_length = 8
  config.objective.cross_attention_heads = 4
  config.objective.zero_init_cross_attention = zero_init
  return config


def _batch(config, size=8, seed=0):
  """Real views of embedded-dataset examples."""
  views = objectives.OBJECTIVES.get('cosmos').views(config)
  rng = np.random.default_rng(seed)
  decode = DecodeRecord()
  examples = [views.random_map(decode.map(records.serialize(synthetic.make_example(0, 'train', 'studio', i, 16))),
                               rng) for i in range(size)]
  return {k: np.stack([e[k] for e in examples]) for k in examples[0]}


def naive_sym_nce(x, y, t):
  """COSMOS Eq. 3 and its symmetric form, from the paper: x_i vs y_i against all x_j, and vice versa."""
  logits = np.exp(t) * x @ y.T
  def nce(l):  # -1/B sum_i log softmax over j of l[j, i]
    l = l - l.max(axis=0, keepdims=True)
    return -np.mean(np.diag(l) - np.log(np.exp(l).sum(axis=0)))
  return (nce(logits) + nce(logits.T)) / 2


def test_views_shapes_and_determinism(micro):
  config = _cosmos(micro)
  batch = _batch(config)
  assert batch['global_images'].shape == (8, 2, 16, 16, 3) and batch['local_images'].shape == (8, 2, 8, 8, 3)
  assert batch['texts'].shape == (8, 2, 16) and batch['local_texts'].shape == (8, 2, 8)
  assert batch['global_images'].dtype == np.uint8  # normalised in the train step
  assert (batch['texts'][:, :, 0] == 49406).all() and (batch['local_texts'][:, :, 0] == 49406).all()
  again = _batch(config)
  for key in batch:
    np.testing.assert_array_equal(batch[key], again[key])
  assert not np.array_equal(batch['global_images'][:, 0], batch['global_images'][:, 1])  # two different crops


def test_caption_first_global_puts_the_short_caption_first_in_every_example(micro):
  config = _cosmos(micro)
  config.objective.caption_in_text_crops = True
  config.objective.caption_first_global = True
  batch = _batch(config)
  captions = [synthetic.make_example(0, 'train', 'studio', i, 16)['caption'] for i in range(8)]
  np.testing.assert_array_equal(batch['texts'][:, 0], default_tokenizer()(captions, context_length=16))
  config.objective.caption_first_global = False  # the first crop is then sampled from the pool, mostly not the caption
  assert not np.array_equal(_batch(config)['texts'][:, 0], batch['texts'][:, 0])


@pytest.mark.slow
def test_loss_matches_naive_reference_and_saco_composes(micro):
  """COSMOS's two terms against the naive reference; the SaCo term adds to them on the first global crops (features
  'zi', 'zt'), as the SaCo paper suggests. One forward of the composed objective checks both: SaCo adds features and a
  term, and leaves COSMOS's features and terms as they were."""
  config = with_term(_cosmos(micro), 'saco', alpha=0.5, normalization='mean')
  validate(config)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  features, _ = jax.jit(objective.forward)(params, state, _batch(config), jax.random.key(1))
  loss, metrics = objective.loss(features, params, 0)
  f = jax.tree.map(lambda x: np.asarray(x, np.float64), features)
  t, tc = float(params['logit_scale']), float(params['cosmos_logit_scale'])
  clip = np.mean([naive_sym_nce(f['cls_global'][:, g], f['eot'][:, c], t) for g in range(2) for c in range(4)])
  cosmos = np.mean([np.mean([naive_sym_nce(f[s][:, a], f[tt][:, b], tc) for a in range(4) for b in range(2)])
                    for s in ('h_img', 'h_txt') for tt in ('teacher_cls', 'teacher_eot')])
  np.testing.assert_allclose(metrics['clip_loss'], clip, rtol=1e-5)
  np.testing.assert_allclose(metrics['cosmos_loss'], cosmos, rtol=1e-5)
  saco_term = 0.5 * saco.saco_loss(features['zi'], features['zt'], normalization='mean')
  np.testing.assert_allclose(loss, clip + cosmos + saco_term, rtol=1e-5)
  np.testing.assert_allclose(loss, metrics['clip_loss'] + metrics['cosmos_loss'] + saco_term, rtol=1e-5)
  assert 'saco_loss' in metrics and 'teacher_' in objective.eval_variants(params, state)
  # The teacher starts as the student: its global-crop embeddings (every crop in one pooled call) equal the
  # student's (the first crop with its token states, the other pooled).
  np.testing.assert_allclose(features['teacher_cls'], features['cls_global'], atol=1e-6)
  np.testing.assert_allclose(features['teacher_eot'], features['eot'][:, :2], atol=1e-6)


@pytest.mark.slow
def test_zero_initialised_cross_attention_distills_the_cls_and_eot(micro):
  config = _cosmos(micro, zero_init=True)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  features, _ = jax.jit(objective.forward)(params, state, _batch(config), jax.random.key(1))
  cls = np.concatenate([np.asarray(features['cls_global'])], axis=1)
  np.testing.assert_allclose(features['h_img'][:, :2], cls, atol=1e-6)  # h_I = cls for the global crops
  np.testing.assert_allclose(features['h_txt'], features['eot'], atol=1e-6)  # h_T = eot for every text crop


def test_ema_update():
  teacher = {'w': jnp.ones((3,)), 'b': {'c': jnp.zeros(2)}}
  student = {'w': jnp.full((3,), 5.0), 'b': {'c': jnp.ones(2)}}
  chex.assert_trees_all_equal(ema_update(teacher, student, 1.0), teacher)  # momentum 1: unchanged
  chex.assert_trees_all_equal(ema_update(teacher, student, 0.0), student)
  chex.assert_trees_all_close(ema_update(teacher, student, 0.9)['w'], jnp.full((3,), 1.4))


def test_a_run_from_a_checkpoint_starts_its_teacher_as_the_loaded_towers(micro):
  """config.init.checkpoint replaces the towers after init_variables copied the random ones into the teacher:
  after_load copies the loaded ones (the trainer calls it right after loading)."""
  config = _cosmos(micro)
  objective = objectives.build(config, models.build_model(config.model))
  params, model_state = objective.init_variables(jax.random.key(0))
  loaded = jax.tree.map(lambda x: x + 1.0, params)  # stands for the checkpoint's towers
  model_state = objective.after_load(loaded, model_state)
  chex.assert_trees_all_equal(model_state['ema'], tower_params(loaded))
  assert not jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), model_state['ema'],
                                       tower_params(params)))


def _train(config, mesh, state, steps=2):
  """(state, losses) after `steps` steps from the host `state` on `mesh`."""
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  tx = optim.make_optimizer(config.optim, config.total_steps)
  shardings = parallel.tree_shardings(state, mesh)
  state = jax.device_put(state, shardings)
  step = compile_train_step(objective, tx, mesh, shardings)
  losses = []
  for i in range(steps):
    state, metrics = step(state, parallel.global_batch(_batch(config, seed=i), mesh), jax.random.key(2))
    losses.append(float(metrics['loss']))
  return state, losses


@pytest.mark.slow
def test_trains_identically_on_eight_devices_and_one_and_moves_the_teacher(micro):
  config = _cosmos(micro)
  config.objective.ema_momentum = 0.5  # a visible teacher step
  initial = initial_state(config)  # on the host: one (jitted) init for both meshes
  want, want_losses = _train(config, parallel.make_mesh(1, jax.devices()[:1]), initial)
  got, got_losses = _train(config, parallel.make_mesh(2), initial)
  np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
  assert_trained_params_close(parallel.to_host(got.params), parallel.to_host(want.params))
  chex.assert_trees_all_close(parallel.to_host(got.model_state), parallel.to_host(want.model_state), rtol=1e-4,
                              atol=2e-5)
  student, teacher = parallel.to_host(want.params), parallel.to_host(want.model_state['ema'])
  assert set(teacher) == set(tower_params(student))
  gap = np.abs(teacher['visual']['proj'] - student['visual']['proj']).max()
  assert 0 < gap  # the teacher lags the student


def test_crop_colour_options_keep_the_colours_of_the_embedded_classes(micro):
  orange = np.broadcast_to(np.array([250, 127, 14], np.uint8), (16, 16, 3)).copy()
  example = {'image': orange, 'caption': 'an orange square', 'long_caption': 'There is an orange square.',
             'label': 0, 'key': 'k', 'source': 'studio'}
  want = colorsys.rgb_to_hsv(250 / 255, 127 / 255, 14 / 255)[0]

  def hue_errors(config):
    views, errors = objectives.OBJECTIVES.get('cosmos').views(config), []
    for seed in range(12):
      out = views.random_map(dict(example), np.random.default_rng(seed))
      # not the second global view: DINO solarises it (p 0.2), which no colour option turns off
      for crop in [out['global_images'][0], *out['local_images']]:
        pixels = crop.reshape(-1, 3).astype(np.float64) / 255
        if (pixels.max(axis=1) - pixels.min(axis=1)).max() < 0.05:  # grey: no hue left
          errors.append(1.0)
          continue
        hues = np.array([colorsys.rgb_to_hsv(*p)[0] for p in pixels])
        errors.append(float(np.abs((hues - want + 0.5) % 1.0 - 0.5).max()))
    return np.array(errors)

  config = _cosmos(micro)
  assert (hue_errors(config) > 0.05).sum() >= 6  # DINO's hue jitter and grayscale move many crops' colour
  config.objective.crop_color_jitter = (0.4, 0.4, 0.2, 0.0)
  config.objective.crop_grayscale_prob = 0.0
  assert hue_errors(config).max() < 0.04  # up to clipping at 0 and 255
  validate(config)
  config.objective.crop_grayscale_prob = 1.5
  with pytest.raises(ConfigError, match='config.objective.crop_grayscale_prob'):
    validate(config)


@pytest.mark.slow
@pytest.mark.parametrize('tower', ['vit', 'resnet'])
def test_global_crops_embed_as_one_call_with_tokens(micro, tower):
  """The first global crops keep their token states and the others run pooled (a ViT), or all go through one call
  (a ResNet, whose BatchNorm normalises over the call's images): either way the same embeddings and first-crop tokens
  as embedding every global crop in one call with its token states."""
  config = _cosmos(micro)
  if tower == 'resnet':
    config.model.vision.update(type='resnet', stages=(1, 1, 1, 1), width=8, heads=2, image_size=32)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  rng = np.random.default_rng(0)
  size = config.model.vision.image_size
  images = jnp.asarray(rng.normal(size=(4, 2, size, size, 3)), jnp.float32)
  tokens = jnp.asarray(_batch(config, size=4)['texts'])

  @jax.jit
  def embed(params):
    split = (objective._embed_global_images(params, state, images, True)[0],
             objective._embed_global_texts(params, tokens))
    whole = (objective.encode_image(params, state, images.reshape(8, size, size, 3), True, with_tokens=True)[0],
             objective.encode_text(params, tokens.reshape(8, -1), with_tokens=True))
    return split, whole

  for got, whole in zip(*embed(params)):  # images, then texts
    np.testing.assert_allclose(got['embed'], whole['embed'].reshape(4, 2, -1), atol=2e-5)
    np.testing.assert_allclose(got['tokens'], whole['tokens'].reshape(4, 2, *whole['tokens'].shape[1:])[:, 0],
                               atol=2e-5)


def test_cc3m_config_puts_the_short_caption_in_the_text_crop_pool():
  """configs/cosmos_cc3m.py follows the authors' code: DreamLIP's raw caption is one more sentence of the pool (and
  not the first global crop, which neither the paper nor that code does)."""
  config = from_file(os.path.join(ROOT, 'configs', 'cosmos_cc3m.py'))
  validate(config)
  options = objectives.OBJECTIVES.get('cosmos').options(config.objective)
  assert options.caption_in_text_crops and not options.caption_first_global
  views = objectives.OBJECTIVES.get('cosmos').views(config)
  assert views.caption_in_text_crops and not views.caption_first_global and views.text_crop_max_sentences == 5
  assert (views.num_global, views.num_local, views.num_text_local, views.local_size) == (2, 6, 6, 96)


def test_text_crop_max_sentences_reaches_the_views_and_is_validated(micro):
  config = _cosmos(micro)
  config.objective.text_crop_max_sentences = 1
  validate(config)
  batch = _batch(config)
  # one-sentence global crops: every crop is a sentence of the long caption, tokenised alone
  longs = [synthetic.make_example(0, 'train', 'studio', i, 16)['long_caption'] for i in range(8)]
  tokenize = default_tokenizer()
  for i, long_caption in enumerate(longs):
    sentences = tokenize(split_sentences(long_caption), context_length=16)
    for crop in batch['texts'][i]:
      assert any(np.array_equal(crop, s) for s in sentences)
  config.objective.text_crop_max_sentences = 0
  with pytest.raises(ConfigError, match='config.objective.text_crop_max_sentences'):
    validate(config)


@pytest.mark.slow
def test_resnet_image_tower_trains(micro):
  """The cross-attention's token projection takes the image tower's token width: a ResNet's tokens have 32 * width
  channels, not `vision.width` (that mismatch crashed the first forward)."""
  config = _cosmos(micro)
  config.model.vision.update(type='resnet', stages=(1, 1, 1, 1), width=8, heads=2, image_size=32)
  config.objective.local_crop_size = 32  # the ResNet's stride is 32
  validate(config)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))  # an eager ResNet init compiles op by op
  assert params['cosmos_xattn_text']['token_proj']['kernel'].shape == (32 * 8, config.model.embed_dim)
  assert params['cosmos_xattn_image']['token_proj']['kernel'].shape == (config.model.text.width,
                                                                         config.model.embed_dim)
  features, _ = jax.jit(objective.forward)(params, state, _batch(config, size=4), jax.random.key(1))
  loss, metrics = objective.loss(features, params, 0)
  assert features['h_txt'].shape == (4, 4, config.model.embed_dim) and np.isfinite(loss)
  assert np.isfinite(metrics['cosmos_loss'])
