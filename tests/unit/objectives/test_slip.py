"""SLIP: the SimCLR loss against a naive numpy reference of the paper's pseudocode (values and gradients) and of the
official code's per-rank loss, its masked self-similarity, sharded == single device without a full B x 2B matrix per
device; the head against a numpy MLP; the SimCLR views (order, probabilities, SLIP's PIL blur); which view feeds
which loss; the objective (views, head variables, loss = clip + c * simclr) trained by the sharded step and end to
end; configs/slip_cc3m.py against the paper's recipe."""
import importlib.util
import math
import os
import pickle

import chex
import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from PIL import Image, ImageFilter

from vlp_jax import models, objectives, parallel
from vlp_jax.config import ConfigError, validate, with_term
from vlp_jax.data.image import transforms
from vlp_jax.data.storage import records
from vlp_jax.losses import affinity_consistency as saco
from vlp_jax.losses.contrastive import clip_infonce
from vlp_jax.losses.simclr import simclr_loss
from vlp_jax.models.heads import SimCLRHead
from vlp_jax.objectives.base import tower_variables
from vlp_jax.objectives.slip import SSL_VIEWS, VIEWS
from vlp_jax.training import optim

from support import (ROOT, assert_trained_params_close, compiled_step, initial_state, jit_init, numeric_grad,
                     unit_vectors)


def _cross_entropy(logits):
  """Mean CE of [N, M] logits with labels arange(N), in float64."""
  top = logits.max(axis=1, keepdims=True)
  lse = np.log(np.sum(np.exp(logits - top), axis=1)) + top[:, 0]
  return np.mean(lse - logits[np.arange(len(logits)), np.arange(len(logits))])


def naive_simclr(z1, z2, tau=0.1):
  """SLIP supplementary, Algorithm 1 (`simclr`), on normalised z1, z2."""
  n = len(z1)
  mask = np.eye(n) * 1e9
  logit = z1 @ z2.T
  logit1 = np.concatenate([logit, z1 @ z1.T - mask], axis=1)
  logit2 = np.concatenate([logit.T, z2 @ z2.T - mask], axis=1)
  return (_cross_entropy(logit1 / tau) + _cross_entropy(logit2 / tau)) / 2


def nt_xent_without_self(z1, z2, tau=0.1):
  """NT-Xent with the self-similarities removed from the denominators altogether (not masked)."""
  n, total = len(z1), 0.0
  for q, k in ((z1, z2), (z2, z1)):
    for i in range(n):
      others = np.concatenate([q[i] @ k.T, np.delete(q[i] @ q.T, i)]) / tau
      total += np.log(np.sum(np.exp(others))) - q[i] @ k[i] / tau
  return total / (2 * n)


@pytest.mark.parametrize('tau', [0.1, 0.5])
def test_simclr_matches_algorithm_1_values_and_gradients(tau):
  rng = np.random.default_rng(0)
  qa, qb = unit_vectors(rng, (6, 4)), unit_vectors(rng, (6, 4))
  loss, metrics = simclr_loss(jnp.asarray(qa, jnp.float32), jnp.asarray(qb, jnp.float32), tau)
  np.testing.assert_allclose(loss, naive_simclr(qa, qb, tau), rtol=1e-5)
  np.testing.assert_allclose((metrics['ssl_loss_a'] + metrics['ssl_loss_b']) / 2, loss, rtol=1e-6)
  grads = jax.grad(lambda a, b: simclr_loss(a, b, tau)[0], argnums=(0, 1))(jnp.asarray(qa, jnp.float32),
                                                                          jnp.asarray(qb, jnp.float32))
  for index, got in enumerate(grads):
    want = numeric_grad(lambda a, b: naive_simclr(a, b, tau), [qa, qb], index)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_self_similarity_is_masked():
  """qa_i . qa_i takes no part: the loss and its gradient are those of NT-Xent without the self terms."""
  rng = np.random.default_rng(1)
  qa, qb = unit_vectors(rng, (5, 3)), unit_vectors(rng, (5, 3))
  fn = lambda a, b: simclr_loss(a, b)[0]  # noqa: E731
  args = (jnp.asarray(qa, jnp.float32), jnp.asarray(qb, jnp.float32))
  np.testing.assert_allclose(fn(*args), nt_xent_without_self(qa, qb), rtol=1e-5)
  for index, got in enumerate(jax.grad(fn, argnums=(0, 1))(*args)):
    np.testing.assert_allclose(got, numeric_grad(nt_xent_without_self, [qa, qb], index), rtol=1e-4, atol=1e-5)
  # Without the mask the self term exp(1 / tau) would dominate every denominator.
  unmasked = (_cross_entropy(np.concatenate([qa @ qb.T, qa @ qa.T], 1) / 0.1)
              + _cross_entropy(np.concatenate([qb @ qa.T, qb @ qb.T], 1) / 0.1)) / 2
  assert unmasked > float(fn(*args)) + 0.5


def test_simclr_accuracy_and_perfect_views():
  rng = np.random.default_rng(2)
  q = unit_vectors(rng, (16, 32)).astype(np.float32)
  loss, metrics = simclr_loss(q, q)  # identical views of near-orthogonal embeddings: every positive wins
  assert float(metrics['ssl_acc']) == 1.0 and float(loss) < 1.0
  _, metrics = simclr_loss(q, -q)
  assert float(metrics['ssl_acc']) == 0.0


def test_simclr_sharded_equals_single_device_without_full_matrices():
  rng = np.random.default_rng(3)
  qa, qb = unit_vectors(rng, (32, 8)).astype(np.float32), unit_vectors(rng, (32, 8)).astype(np.float32)
  fn = jax.value_and_grad(lambda a, b: simclr_loss(a, b, 0.1)[0], argnums=(0, 1))
  want = jax.jit(fn)(qa, qb)
  mesh = parallel.make_mesh(fsdp=2)
  rows = NamedSharding(mesh, P(parallel.BATCH_AXES))
  with jax.set_mesh(mesh):
    sharded = (jax.device_put(qa, rows), jax.device_put(qb, rows))
    got = jax.jit(fn)(*sharded)
    hlo = jax.jit(fn).lower(*sharded).compile().as_text()
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)
  for shape in ('f32[32,64]', 'f32[64,32]', 'f32[32,32]'):  # each device holds 4 rows of every logit matrix
    assert shape not in hlo
  assert 'f32[4,64]' in hlo


def official_simclr(qa, qb, tau=0.1, world=2):
  """SLIP's released SIMCLRLoss as `world` ranks run it: each normalises its rows, gathers every rank's keys, takes
  labels rank * n + arange(n) and subtracts the self mask after the temperature; DDP averages the ranks' losses.
  -> (loss, accuracy as a fraction)."""
  qa = qa / np.linalg.norm(qa, axis=1, keepdims=True)
  qb = qb / np.linalg.norm(qb, axis=1, keepdims=True)
  n, total = len(qa) // world, len(qa)
  losses, correct = [], 0
  for rank in range(world):
    rows, labels = slice(rank * n, (rank + 1) * n), rank * n + np.arange(n)
    mask = np.eye(total)[labels] * 1e9
    logits_a = np.concatenate([qa[rows] @ qb.T / tau, qa[rows] @ qa.T / tau - mask], axis=1)
    logits_b = np.concatenate([qb[rows] @ qa.T / tau, qb[rows] @ qb.T / tau - mask], axis=1)
    ce = [np.mean(np.log(np.sum(np.exp(x - x.max(1, keepdims=True)), 1)) + x.max(1) - x[np.arange(n), labels])
          for x in (logits_a, logits_b)]
    losses.append((ce[0] + ce[1]) / 2)
    correct += np.sum(np.argmax(logits_a, axis=1) == labels)
  return np.mean(losses), correct / total


def test_simclr_matches_the_official_per_rank_code():
  """The global-batch loss is what SLIP's ranks compute together: the same 2B - 2 negatives for every anchor (the
  other view and the same view of every other image of the global batch), tau 0.1 by default."""
  rng = np.random.default_rng(4)
  qa, qb = rng.normal(size=(8, 5)), rng.normal(size=(8, 5))
  want_loss, want_acc = official_simclr(qa, qb, world=4)
  normalise = lambda x: jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), jnp.float32)  # noqa: E731
  loss, metrics = simclr_loss(normalise(qa), normalise(qb))
  np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
  np.testing.assert_allclose(metrics['ssl_acc'], want_acc, rtol=1e-6)
  np.testing.assert_allclose(official_simclr(qa, qb, world=1)[0], want_loss, rtol=1e-10)  # one rank: the same


# ---------------------------------------------------------------------------------------------------------------
# The objective


def _slip(config, **options):
  config.objective.name = 'slip'
  config.objective.update({'head_mlp_dim': 64, 'head_out_dim': 16, **options})
  return config


def _batches(config, n, seed=0):
  """Random global batches with the SLIP views."""
  rng = np.random.default_rng(seed)
  size, length, b = config.model.vision.image_size, config.model.text.context_length, config.batch_size
  out = []
  for _ in range(n):
    text = rng.integers(1, 49000, (b, length)).astype(np.int32)
    text[:, 0], text[:, 5] = 49406, 49407
    batch = {view: rng.normal(size=(b, size, size, 3)).astype(np.float32) for view in ('image', 'ssl_a', 'ssl_b')}
    out.append({**batch, 'text': text, 'label': np.zeros(b, np.int32)})
  return out


@pytest.mark.slow
def test_variables_loss_and_metrics(micro):
  _slip(micro, ssl_scale=0.5, ssl_temperature=0.2)
  with_term(micro, 'saco', alpha=0.01, normalization='mean')  # composes: SaCo reads the CLIP view's zi, zt
  model = models.build_model(micro.model)
  objective = objectives.build(micro, model)
  (params, state), (clip_params, _) = jit_init(
      lambda key: (objective.init_variables(key), models.init_variables(model, key)))(jax.random.key(0))
  chex.assert_trees_all_equal({k: v for k, v in params.items() if k != 'simclr_head'}, clip_params)  # same towers
  assert params['simclr_head']['layer1']['kernel'].shape == (32, 64)  # from the ViT width, 32
  assert params['simclr_head']['layer3']['kernel'].shape == (64, 16)
  assert set(state) == {'simclr_head'} and set(state['simclr_head']['batch_stats']) == {'bn1', 'bn2'}
  assert set(tower_variables(params, state)) == {'params'}  # the head's statistics are not the towers'

  @jax.jit
  def run(params, state, batch):
    features, new_state = objective.forward(params, state, batch, jax.random.key(1), True)
    _, eval_state = objective.forward(params, new_state, batch, jax.random.key(1), False)
    want = (clip_infonce(features['zi'], features['zt'], params['logit_scale'])[0]
            + 0.5 * simclr_loss(features['ssl_a'], features['ssl_b'], 0.2)[0]
            + 0.01 * saco.saco_loss(features['zi'], features['zt'], normalization='mean'))
    fused, _ = objective.base.encode_views(params, state, batch, True)
    separate = [objective.encode_image(params, state, batch[view], True)[0] for view in ('image', 'ssl_a', 'ssl_b')]
    return features, new_state, eval_state, objective.loss(features, params, np.int32(0)), want, fused, separate

  batch = _batches(micro, 1)[0]
  features, new_state, eval_state, (loss, metrics), want, fused, separate = run(params, state, batch)
  assert {k: v.shape for k, v in features.items()} == {'zi': (16, 32), 'zt': (16, 32), 'ssl_a': (16, 16),
                                                        'ssl_b': (16, 16), 'ssl_a_cls': (16, 32),
                                                        'ssl_b_cls': (16, 32)}
  np.testing.assert_allclose(jnp.linalg.norm(features['ssl_a'], axis=-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert {'clip_loss', 'ssl_loss', 'ssl_acc', 'saco_loss'} <= set(metrics)
  # The ViT tower sees the three views as one batch of 3B: the same as one pass per view.
  for got, expected in zip(fused, separate):
    chex.assert_trees_all_close(got, {key: expected[key] for key in ('embed', 'cls')}, rtol=1e-5, atol=1e-6)
  # Training moves the head's running statistics; evaluation reads them and leaves them alone.
  assert float(jnp.abs(new_state['simclr_head']['batch_stats']['bn1']['mean']).max()) > 0
  chex.assert_trees_all_equal(eval_state, new_state)
  with pytest.raises(KeyError, match='ssl_a'):
    objective.features(params, state, {'image': batch['image'], 'text': batch['text']}, jax.random.key(1))


def test_invalid_options_name_the_key(micro):
  _slip(micro, clip_crop_scale=(0.8, 0.5))
  with pytest.raises(ConfigError, match=r'config.objective.clip_crop_scale=\(0.8, 0.5\)'):
    validate(micro)
  with pytest.raises(ValueError, match=r'config.objective.clip_crop_scale=\(0.8, 0.5\)'):
    objectives.build(micro, models.build_model(micro.model))
  micro.objective.clip_crop_scale = (0.5, 1.0)
  micro.objective.ssl_temperature = 0.0
  with pytest.raises(ValueError, match='config.objective.ssl_temperature'):
    objectives.OBJECTIVES.get('slip').views(micro)
  micro.objective.ssl_temperature = 0.1
  validate(micro)
  micro.objective.ssl_color_jitter = (0.4, 0.4, 0.4)  # the hue is missing
  with pytest.raises(ConfigError, match=r'config.objective.ssl_color_jitter=\(0.4, 0.4, 0.4\)'):
    validate(micro)
  micro.objective.ssl_color_jitter = (0.4, 0.4, 0.4, 0.0)
  micro.objective.ssl_crop_scale = (0.0, 1.0)
  with pytest.raises(ConfigError, match='config.objective.ssl_crop_scale'):
    validate(micro)
  micro.objective.ssl_crop_scale = (0.08, 1.0)
  micro.objective.ssl_background = 'shuffle'
  with pytest.raises(ConfigError, match=r"config.objective.ssl_background='shuffle' .*\['keep', 'random'\]"):
    validate(micro)


def test_views(micro):
  _slip(micro)
  views = objectives.OBJECTIVES.get('slip').views(micro)
  views = pickle.loads(pickle.dumps(views))  # grain ships it to the data workers
  rng = np.random.default_rng(0)
  examples = [{'image': rng.integers(0, 256, (24, 30, 3), dtype=np.uint8), 'caption': f'a photo of {i}',
               'long_caption': '', 'label': i, 'key': str(i), 'source': 'test'} for i in range(3)]
  dataset = grain.MapDataset.source(examples).random_map(views, seed=7)
  out = dataset[1]
  size, length = micro.model.vision.image_size, micro.model.text.context_length
  assert set(out) == {'image', 'ssl_a', 'ssl_b', 'text', 'label'}
  for view in ('image', 'ssl_a', 'ssl_b'):
    assert out[view].shape == (size, size, 3) and out[view].dtype == np.uint8  # normalised in the step
  assert out['text'].shape == (length,) and out['text'].dtype == np.int32 and int(out['label']) == 1
  assert not np.array_equal(out['ssl_a'], out['ssl_b'])  # two different random views
  chex.assert_trees_all_equal(dataset[1], out)  # deterministic per (seed, index)
  again = grain.MapDataset.source(examples).random_map(views, seed=8)[1]
  assert not np.array_equal(again['ssl_a'], out['ssl_a'])


def test_head_is_slips_three_layer_mlp():
  """Linear, BN, ReLU, Linear, BN, ReLU, Linear (with bias, no BN) on a numpy reference; BatchNorm normalises with
  the batch's statistics (biased variance, eps 1e-5) in training and moves its running mean by 0.1 of the batch's."""
  rng = np.random.default_rng(5)
  x = rng.normal(size=(6, 5)).astype(np.float32)
  head = SimCLRHead(mlp_dim=8, out_dim=3)
  variables = head.init(jax.random.key(0), x, train=False)
  params = jax.tree.map(lambda p: np.asarray(p) + 0.3 * rng.normal(size=p.shape).astype(np.float32),
                        variables['params'])  # affine BatchNorm parameters and a bias away from their init
  assert set(params) == {'layer1', 'bn1', 'layer2', 'bn2', 'layer3'}
  assert [params[f'layer{i}']['kernel'].shape for i in (1, 2, 3)] == [(5, 8), (8, 8), (8, 3)]
  assert set(params['layer3']) == {'kernel', 'bias'}  # the hidden biases are cancelled by BN (docs/methods.md)
  out, updates = head.apply({'params': params, 'batch_stats': variables['batch_stats']}, x, True,
                            mutable=['batch_stats'])

  def bn(h, p):
    return (h - h.mean(0)) / np.sqrt(h.var(0) + 1e-5) * p['scale'] + p['bias']

  h = np.asarray(x, np.float64)
  for i in (1, 2):
    h = np.maximum(bn(h @ params[f'layer{i}']['kernel'], params[f'bn{i}']), 0.0)
  want = h @ params['layer3']['kernel'] + params['layer3']['bias']
  np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(updates['batch_stats']['bn1']['mean'],
                             0.1 * (np.asarray(x, np.float64) @ params['layer1']['kernel']).mean(0), rtol=1e-4,
                             atol=1e-6)
  defaults = objectives.OBJECTIVES.get('slip').default_config()
  assert (defaults['head_mlp_dim'], defaults['head_out_dim']) == (4096, 256)
  assert (defaults['ssl_scale'], defaults['ssl_temperature']) == (1.0, 0.1)


@pytest.mark.slow
def test_each_view_feeds_its_loss(micro):
  """zi is the CLIP view's projected embedding; the SimCLR head reads each SSL view's class token (width 32), not
  its projection (embed 24); and loss = clip(zi, zt) + c * simclr(ssl_a, ssl_b)."""
  _slip(micro, ssl_scale=0.5)
  micro.model.embed_dim = 24
  micro.batch_size = 8
  objective = objectives.build(micro, models.build_model(micro.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  batch = _batches(micro, 1)[0]

  @jax.jit
  def run(params, state, batch):
    features, _ = objective.forward(params, state, batch, jax.random.key(1), True)
    towers = {view: objective.encode_image(params, state, batch[view], False)[0] for view in VIEWS}
    heads = {view: objective.project(params, state, towers[view]['cls'], True)[0] for view in SSL_VIEWS}
    return features, towers, heads, objective.loss(features, params, np.int32(0))[0]

  features, towers, heads, loss = run(params, state, batch)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
  np.testing.assert_allclose(features['zi'], unit(np.asarray(towers['image']['embed'])), rtol=1e-4, atol=1e-5)
  for view in SSL_VIEWS:
    assert features[f'{view}_cls'].shape == (8, 32)
    np.testing.assert_allclose(features[f'{view}_cls'], towers[view]['cls'], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(features[view], heads[view], rtol=1e-4, atol=1e-5)
  assert not np.allclose(features['zi'], unit(np.asarray(towers['ssl_a']['embed'])), atol=1e-3)
  want = (clip_infonce(features['zi'], features['zt'], params['logit_scale'])[0]
          + 0.5 * simclr_loss(features['ssl_a'], features['ssl_b'], 0.1)[0])
  np.testing.assert_allclose(loss, want, rtol=1e-5)


def test_simclr_view_follows_slips_augment(monkeypatch):
  """SLIP's `augment`: RandomResizedCrop(scale (0.08, 1)), ColorJitter(0.4, 0.4, 0.4, 0.1) applied with p 0.8,
  RandomGrayscale(0.2), GaussianBlur(sigma (0.1, 2)) with p 0.5, RandomHorizontalFlip, in that order."""
  calls = []

  def spy(name, fn):
    def wrapped(image, *args, **kwargs):
      calls.append((name, args[1] if name == 'crop' else None, kwargs))  # the crop's scale: (size, scale, rng)
      return fn(image, *args, **kwargs)
    monkeypatch.setattr(transforms, fn.__name__, wrapped)

  for name, fn in (('crop', transforms.random_resized_crop), ('jitter', transforms.color_jitter),
                   ('gray', transforms.random_grayscale), ('blur', transforms.gaussian_blur),
                   ('flip', transforms.horizontal_flip)):
    spy(name, fn)
  image = np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8)
  jittered = 0
  for seed in range(400):
    calls.clear()
    transforms.simclr_view(image, 8, np.random.default_rng(seed))
    names = [name for name, _, _ in calls]
    jittered += 'jitter' in names
    assert names in (['crop', 'jitter', 'gray', 'blur', 'flip'], ['crop', 'gray', 'blur', 'flip'])
    args = {name: (a, k) for name, a, k in calls}
    assert args['crop'][0] == (0.08, 1.0)
    assert args['gray'][1] == {'p': 0.2} and args['blur'][1] == {'sigma': (0.1, 2.0), 'p': 0.5}
    assert args['flip'][1] == {'p': 0.5}
    if 'jitter' in names:
      assert args['jitter'][1] == {'brightness': 0.4, 'contrast': 0.4, 'saturation': 0.4, 'hue': 0.1}
  assert abs(jittered / 400 - 0.8) < 0.06  # 3 standard deviations of a binomial(400, 0.8) fraction


@pytest.mark.parametrize('sigma', [0.5, 1.0, 2.0])
def test_blur_matches_slips_pil_blur_at_224(sigma):
  """SLIP blurs with PIL's GaussianBlur(radius=sigma), whose support is not truncated; at 224 px our SimCLR kernel
  (23 taps) gives the same image to within a grey level on average (docs/methods.md: not so at 32 px)."""
  image = np.random.default_rng(6).integers(0, 256, (224, 224, 3), dtype=np.uint8)
  ours = transforms.gaussian_blur(image, np.random.default_rng(0), sigma=(sigma, sigma), p=1.0).astype(np.float64)
  pil = np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(radius=sigma)), np.float64)
  inner = slice(8, -8)  # the borders are padded differently (reflect vs PIL's edge)
  assert np.abs(ours - pil)[inner, inner].mean() < 1.5


def test_cc3m_config_is_the_papers_recipe():
  """configs/slip_cc3m.py: ViT-B/16 (SLIP's CC3M model), batch 4096, 40 epochs; AdamW (0.9, 0.98, 1e-8), lr 3e-3 from
  1e-6 over one epoch, cosine to 1e-5, wd 0.1; c = 1, tau 0.1, head 4096-4096-256; the paper's views."""
  spec = importlib.util.spec_from_file_location('slip_cc3m', os.path.join(ROOT, 'configs', 'slip_cc3m.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert module.DATASET == 'cc3m' and module.SETTINGS['cc3m'][1] == 40  # supplementary §3
  assert module.SETTINGS['yfcc15m'] == (14_600_000, 25)  # ~3,500 warmup steps at batch 4096 (supplementary §3)
  config = module.get_config()
  validate(config)
  vision, text = config.model.vision, config.model.text
  assert (vision.type, vision.image_size, vision.patch_size, vision.width, vision.layers, vision.heads) == (
      'vit', 224, 16, 768, 12, 12)
  assert (config.model.embed_dim, text.width, text.heads, text.layers, text.context_length) == (512, 512, 8, 12, 77)
  steps_per_epoch = math.ceil(module.CC3M_TRAIN_EXAMPLES / 4096)
  assert config.batch_size == 4096 and config.total_steps == 40 * steps_per_epoch
  o = config.optim
  assert (o.b1, o.b2, o.eps, o.weight_decay, o.grad_clip_norm, o.warmup_steps) == (
      0.9, 0.98, 1e-8, 0.1, 0.0, steps_per_epoch)
  schedule = optim.learning_rate_schedule(o, config.total_steps)
  np.testing.assert_allclose([schedule(0), schedule(steps_per_epoch), schedule(config.total_steps)],
                             [1e-6, 3e-3, 1e-5], rtol=1e-5)
  options = objectives.OBJECTIVES.get('slip').options(config.objective)
  assert (options.ssl_scale, options.ssl_temperature, options.head_mlp_dim, options.head_out_dim) == (
      1.0, 0.1, 4096, 256)
  assert tuple(options.clip_crop_scale) == (0.5, 1.0) and tuple(options.ssl_crop_scale) == (0.08, 1.0)
  assert tuple(options.ssl_color_jitter) == (0.4, 0.4, 0.4, 0.1) and options.ssl_grayscale_prob == 0.2
  assert options.ssl_background == 'keep'


def test_random_background_views_share_only_the_objects(micro):
  # Two records with the same object on different backgrounds: with ssl_background='random' their SimCLR views are
  # the same pixels (the views keep nothing of the background), while their CLIP views still differ.
  _slip(micro, ssl_background='random')
  views = pickle.loads(pickle.dumps(objectives.OBJECTIVES.get('slip').views(micro)))
  rng = np.random.default_rng(0)
  size = micro.model.vision.image_size
  mask = np.zeros((size, size), np.uint8)
  mask[size // 4:size // 2, size // 4:3 * size // 4] = 3
  examples = []
  for i in range(2):
    image = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    image[mask > 0] = (200, 30, 30)
    examples.append({'image': image, 'mask': records.encode_png(mask), 'caption': 'a red square', 'label': 2,
                     'key': str(i)})
  first, second = (views.random_map(example, np.random.default_rng(3)) for example in examples)
  for view in ('ssl_a', 'ssl_b'):
    np.testing.assert_array_equal(first[view], second[view])
  assert not np.array_equal(first['image'], second['image'])
  assert not np.array_equal(first['ssl_a'], first['ssl_b'])
  kept = pickle.loads(pickle.dumps(objectives.OBJECTIVES.get('slip').views(_slip(micro, ssl_background='keep'))))
  assert not np.array_equal(kept.random_map(examples[0], np.random.default_rng(3))['ssl_a'],
                            kept.random_map(examples[1], np.random.default_rng(3))['ssl_a'])
  with pytest.raises(ValueError, match="ssl_background='random' needs a per-pixel class map .* record '0'"):
    views.random_map({key: value for key, value in examples[0].items() if key != 'mask'}, rng)


@pytest.mark.slow
def test_trains_identically_on_eight_devices_and_one(micro):
  _slip(micro)
  micro.mesh.fsdp_min_size = 256
  initial = initial_state(micro)  # one init (on the host) for both meshes

  def run(mesh):
    step_fn, state = compiled_step(micro, mesh, initial)
    losses = []
    for batch in _batches(micro, 3):
      state, metrics = step_fn(state, parallel.global_batch(batch, mesh), jax.random.key(1))
      losses.append(float(metrics['loss']))
    return losses, parallel.to_host(state.params), parallel.to_host(state.model_state)

  want_losses, want_params, want_state = run(parallel.make_mesh(1, jax.devices()[:1]))
  got_losses, got_params, got_state = run(parallel.make_mesh(2))
  np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
  assert_trained_params_close(got_params, want_params)
  chex.assert_trees_all_close(got_state, want_state, rtol=1e-4, atol=1e-6)  # the head's BatchNorm statistics
  assert np.abs(want_state['simclr_head']['batch_stats']['bn1']['mean']).max() > 1e-3
  assert want_losses[-1] < want_losses[0]
