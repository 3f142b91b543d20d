"""Gradient accumulation: the decoupled gradient equals the full-batch gradient for every objective (logit scales and
biases included), on 8 devices; 'microbatch' is exact for per-example losses and refused for contrastive ones;
micro-batches stay spread over every device; remat and bf16 keep parameters and results."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import (assert_close_at_scale, assert_trained_params_close, initial_state, micro_config, objective_batch,
                     run_steps)
from vlp_jax import models, objectives, parallel
from vlp_jax.config import ConfigError, validate, with_term
from vlp_jax.data.image.image_ops import normalize_image
from vlp_jax.models.towers import VISION_TOWERS
from vlp_jax.accumulation import num_micro_batches
from vlp_jax.objectives.clip import ClipObjective
from vlp_jax import accumulation

BATCH = 32


def _configure(config, setup):
  if setup in ('clip', 'siglip', 'slip', 'cosmos', 'zerovl'):
    config.objective.name = setup
  if setup == 'saco':
    config.data.teacher_embeddings = '/unused/the/batch/carries/teacher.npz'
    with_term(config, 'saco', alpha=2.0, beta=1.5, ramp='linear', ramp_steps=10, masking='soft',
              mask_threshold=0.0)
  if setup == 'slip':
    config.objective.update(head_mlp_dim=64, head_out_dim=16)
  if setup in ('cosmos', 'cosmos+saco'):
    config.objective.update(name='cosmos', num_local_crops=2, num_local_texts=2, local_crop_size=8,
                            local_text_context_length=8, cross_attention_heads=2)
  if setup == 'cosmos+saco':
    with_term(config, 'saco', alpha=1.0)
  if setup == 'zerovl':
    config.objective.mixup_alpha = 2.0  # lam mostly inside (0, 1), so that both mixes matter
  return config


_COMPILED = {}  # (objective, mode, num_micro) -> jitted loss and gradients: one compile per setup and mode


def _loss_and_grads(objective, params, state, batch, rng, mode, num_micro, mesh):
  key = (objective, mode, num_micro)
  if key not in _COMPILED:
    fn = accumulation.loss_and_grad_fn(mode, num_micro)
    _COMPILED[key] = jax.jit(lambda p, s, b, r: fn(objective, p, s, b, r, jnp.int32(4)))
  with jax.set_mesh(mesh):
    out = _COMPILED[key](params, state, parallel.global_batch(batch, mesh), rng)
  return parallel.to_host(out)


SETUPS = ['clip', 'siglip', 'saco', 'slip', 'cosmos+saco', 'zerovl']  # cosmos+saco covers COSMOS and composition
# A stochastic image tower (conftest's noisy_vision_tower) makes the decoupled step exact only if every row keeps its
# key in its micro-batch (SLIP: each of its three fused views; COSMOS: each of its crops).
NOISY_SETUPS = ('clip', 'slip', 'cosmos+saco')
# COSMOS embeds a ViT's first global crops on a path of their own (tokens kept, the other crops pooled): its noisy
# tower stands in for the ViT under vision.type 'vit', so that the decoupled step runs that path with a key per crop
# (test_tower_rng.py checks that the one-call path of other towers gives each crop the same key).
NOISY_AS_VIT_SETUPS = ('cosmos+saco',)
# The views send uint8 images; every path to the towers (whole batch, decoupled micro-batches, ZeroVL's pixel mixup
# in `prepare`) must normalise them first. SLIP has three image entries; COSMOS's [B, crops, H, W, 3] entries are
# covered in test_pipeline.py.
UINT8_SETUPS = ('slip', 'zerovl')


def _uint8_images(batch):
  """(the batch with uint8 images, the same batch with those images normalised on the host)."""
  rng = np.random.default_rng(5)
  raw = {k: rng.integers(0, 256, v.shape, dtype=np.uint8) if v.dtype == np.float32 and v.shape[-1] == 3 else v
         for k, v in batch.items()}
  assert {k for k, v in raw.items() if v.dtype == np.uint8} >= {'image'}
  return raw, {k: normalize_image(v) if v.dtype == np.uint8 else v for k, v in raw.items()}


@pytest.mark.slow
@pytest.mark.parametrize('setup', SETUPS)
def test_decoupled_gradient_equals_the_full_batch_gradient(micro, noisy_vision_tower, monkeypatch, setup):
  """The same loss, metrics, model state and gradient whole or in micro-batches (not their average: CLIP checks that
  it differs), with a stochastic image tower for NOISY_SETUPS. With uint8 images (UINT8_SETUPS) the whole-batch step
  on them equals it on the host-normalised floats, and the decoupled step takes them too: it equals the whole batch
  only if it normalises them as well (one program per path and dtype: a jit compiles again for uint8 inputs)."""
  config = _configure(micro, setup)
  if setup in NOISY_AS_VIT_SETUPS:
    monkeypatch.setitem(VISION_TOWERS, 'vit', noisy_vision_tower)
  elif setup in NOISY_SETUPS:
    config.model.vision.type = 'noisy'
  validate(config)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = objective.init_variables(jax.random.key(0))
  batch = objective_batch(config, BATCH)
  decoupled_batch = batch
  if setup in UINT8_SETUPS:
    raw, batch = _uint8_images(batch)
    decoupled_batch = raw  # compared with the whole batch's host-normalised floats below
  mesh = parallel.make_mesh()
  rngs = [jax.random.key(3)]
  if setup == 'zerovl':  # one step rng where the coin mixes images, one where it mixes texts
    draws = [objective.draw_mixup(jax.random.key(i)) for i in range(40)]
    rngs = [jax.random.key(next(i for i, (_, heads) in enumerate(draws) if bool(heads) == want))
            for want in (True, False)]
  # SLIP's head has BatchNorm: its backward sums O(1) per-row terms that cancel (normalised rows have zero mean)
  # and divides by each channel's batch std, small for some channels of 32 rows. That amplifies float32
  # rounding to ~1e-5 of a leaf on some CPUs (AMD EPYC), in the head and in everything upstream of it.
  rtol = 1e-4 if setup == 'slip' else 1e-5
  for rng in rngs:
    loss, metrics, new_state, grads = _loss_and_grads(objective, params, state, batch, rng, 'none', 1, mesh)
    if setup in UINT8_SETUPS:  # the whole-batch step normalises uint8 images as the host does
      u_loss, _, _, u_grads = _loss_and_grads(objective, params, state, raw, rng, 'none', 1, mesh)
      np.testing.assert_allclose(u_loss, loss, rtol=1e-6)
      assert_close_at_scale(u_grads, grads, rtol)
    for num_micro in ((2, 4) if setup == 'clip' else (4,)):  # micro-batches of 16 / 8 rows: 2 / 1 per device
      d_loss, d_metrics, d_state, d_grads = _loss_and_grads(objective, params, state, decoupled_batch, rng,
                                                            'decoupled', num_micro, mesh)
      np.testing.assert_allclose(d_loss, loss, rtol=1e-5)
      chex.assert_trees_all_close(d_metrics, metrics, rtol=1e-5, atol=1e-6)
      assert_close_at_scale(d_state, new_state, rtol)
      assert_close_at_scale(d_grads, grads, rtol)
  if setup == 'clip':  # the naive average of micro-batch gradients differs for CLIP: the checks above could fail
    *_, average = _loss_and_grads(objective, params, state, batch, rngs[0], 'microbatch', 4, mesh)
    with pytest.raises(AssertionError):
      assert_close_at_scale(average, grads, rtol=1e-3)
  if setup in NOISY_SETUPS:  # the noise is there: another step rng draws another loss (the 'none' program, rerun)
    other, *_ = _loss_and_grads(objective, params, state, batch, jax.random.key(4), 'none', 1, mesh)
    assert abs(float(other) - float(loss)) > 1e-4
  # The loss's own parameters get their gradient too (it is not zero, so the check above means something).
  own = {'clip': ['logit_scale'], 'siglip': ['logit_scale', 'logit_bias'], 'saco': ['logit_scale'],
         'slip': ['logit_scale', 'simclr_head'], 'cosmos+saco': ['logit_scale', 'cosmos_logit_scale'],
         'zerovl': ['logit_scale']}[setup]
  for key in own:
    assert max(float(np.abs(leaf).max()) for leaf in jax.tree.leaves(d_grads[key])) > 0, key


class _CosineMatching(ClipObjective):
  """A per-example loss (mean of 1 - cos(zi_n, zt_n)): averaging micro-batch gradients is exact for it."""
  per_example_loss = True

  def loss(self, features, params, step):
    del params, step
    loss = jnp.mean(1.0 - jnp.sum(features['zi'] * features['zt'], axis=-1))
    return loss, {'cosine_loss': loss}


@pytest.mark.slow
def test_microbatch_mode_is_exact_for_a_per_example_loss(micro):
  objective = _CosineMatching(models.build_model(micro.model), ClipObjective.options(micro.objective))
  params, state = objective.init_variables(jax.random.key(0))
  batch, mesh = objective_batch(micro, BATCH), parallel.make_mesh()
  loss, _, _, grads = _loss_and_grads(objective, params, state, batch, jax.random.key(0), 'none', 1, mesh)
  m_loss, _, _, m_grads = _loss_and_grads(objective, params, state, batch, jax.random.key(0), 'microbatch', 4, mesh)
  np.testing.assert_allclose(m_loss, loss, rtol=1e-5)
  assert_close_at_scale(m_grads, grads)


@pytest.mark.parametrize('setup', ['clip', 'saco', 'zerovl'])
def test_microbatch_mode_is_refused_for_contrastive_objectives(micro, setup):
  config = _configure(micro, setup)
  config.accumulation.update(mode='microbatch', micro_batch_size=8)
  with pytest.raises(ConfigError, match="config.accumulation.mode='microbatch'.*decoupled"):
    validate(config)
  config.accumulation.mode = 'decoupled'
  validate(config, num_devices=8)


def test_accumulation_config_errors_name_the_key(micro):
  micro.accumulation.update(mode='decoupled', micro_batch_size=6)
  with pytest.raises(ConfigError, match=r'micro_batch_size.*divisor of config.batch_size=16'):
    validate(micro)
  micro.accumulation.micro_batch_size = 4
  with pytest.raises(ConfigError, match='micro_batch_size=4 must be divisible by the device count 8'):
    validate(micro, num_devices=8)
  micro.accumulation.mode = 'gradcache'
  with pytest.raises(ConfigError, match=r"accumulation.mode='gradcache'.*\['none', 'decoupled', 'microbatch'\]"):
    validate(micro)


def test_micro_batches_take_a_slice_of_every_device(micro):
  rows = np.arange(32)
  split = np.asarray(accumulation.split_micro_batches(rows, 4, num_shards=8))
  # Device d holds rows 4d..4d+3; micro-batch i takes row 4d + i of each device.
  np.testing.assert_array_equal(split[1], np.arange(8) * 4 + 1)
  np.testing.assert_array_equal(np.asarray(accumulation.merge_micro_batches(split, num_shards=8)), rows)
  # Under a mesh, a micro-batch's rows stay on their devices: its sharding splits it over all 8.
  mesh = parallel.make_mesh()
  with jax.set_mesh(mesh):
    x = jax.jit(lambda r: accumulation.split_micro_batches(r, 4))(parallel.global_batch(rows.astype(np.float32),
                                                                                         mesh))
  assert x.sharding.shard_shape(x.shape) == (4, 1) and len(x.sharding.device_set) == 8  # [micro, rows / 8]
  with pytest.raises(ValueError, match='does not split into 3 micro-batches over 8 devices'):
    accumulation.split_micro_batches(rows, 3, num_shards=8)


@pytest.mark.slow
def test_decoupled_train_step_trains_like_the_whole_batch(micro):
  """Three optimizer steps through the compiled train step on a 2 x 4 fsdp mesh: the same losses and parameters
  either way. The micro config's 16 rows in 2 micro-batches of 8 keep a row on every device; these are the programs
  of test_train_step.py's fsdp run and test_weight_ema.py's run without the EMA (one compile each in the session's
  cache)."""
  micro.mesh.fsdp_min_size = 256  # small enough that the micro model's matrices are fsdp-sharded
  mesh = parallel.make_mesh(fsdp=2)
  initial = initial_state(micro)  # on the host: one (jitted) init for both modes
  params, losses, _ = run_steps(micro, mesh, state=initial)
  micro.accumulation.update(mode='decoupled', micro_batch_size=8)
  assert num_micro_batches(micro) == 2
  d_params, d_losses, _ = run_steps(micro, mesh, state=initial)
  np.testing.assert_allclose(d_losses, losses, rtol=1e-5)
  assert_trained_params_close(d_params, params)


@pytest.fixture(scope='module')
def plain_clip(data_cache):
  """(objective, params, model state) of the micro CLIP: one objective, so that the tests below that take its
  whole-batch gradient run one compiled program (_COMPILED)."""
  config = micro_config(data_cache)
  objective = objectives.build(config, models.build_model(config.model))
  return objective, *objective.init_variables(jax.random.key(0))


@pytest.mark.slow
def test_remat_keeps_parameters_and_gradients(micro, plain_clip):
  objective, params, state = plain_clip
  micro.model.remat = True
  remat = objectives.build(micro, models.build_model(micro.model))
  r_params, _ = remat.init_variables(jax.random.key(0))
  chex.assert_trees_all_equal(r_params, params)  # same names, shapes and initial values
  batch, mesh = objective_batch(micro, size=16), parallel.make_mesh()
  loss, _, _, grads = _loss_and_grads(objective, params, state, batch, jax.random.key(0), 'none', 1, mesh)
  r_loss, _, _, r_grads = _loss_and_grads(remat, params, state, batch, jax.random.key(0), 'none', 1, mesh)
  np.testing.assert_allclose(r_loss, loss, rtol=1e-6)
  assert_close_at_scale(r_grads, grads, rtol=1e-5)
  text = jax.jit(lambda p: jax.grad(lambda q: jnp.sum(remat.encode_text(q, batch['text'])['embed']))(p))
  jaxpr = str(jax.make_jaxpr(text)(params))
  assert 'remat' in jaxpr or 'checkpoint' in jaxpr


@pytest.mark.slow
def test_padded_attention_keeps_decoupled_accumulation_exact(micro):
  """config.model.attention='padded' (the rows cuDNN gets, masked by their true length) in 2 micro-batches: the
  loss and gradient of the unpadded model ('xla', the same parameters) on the whole batch. Two blocks per tower:
  a pooled tower's last block computes its pooled row on the unpadded path whatever the route."""
  micro.model.vision.layers = micro.model.text.layers = 2
  micro.model.attention = 'xla'
  objective = objectives.build(micro, models.build_model(micro.model))
  params, state = objective.init_variables(jax.random.key(0))
  micro.model.attention = 'padded'
  validate(micro)
  padded = objectives.build(micro, models.build_model(micro.model))
  batch, mesh = objective_batch(micro, size=16), parallel.make_mesh()
  loss, _, _, grads = _loss_and_grads(objective, params, state, batch, jax.random.key(0), 'none', 1, mesh)
  d_loss, _, _, d_grads = _loss_and_grads(padded, params, state, batch, jax.random.key(0), 'decoupled', 2, mesh)
  np.testing.assert_allclose(d_loss, loss, rtol=1e-5)
  assert_close_at_scale(d_grads, grads)


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_weights_and_loss(micro, plain_clip):
  objective, params, state = plain_clip
  micro.model.dtype = 'bfloat16'
  validate(micro)
  half = objectives.build(micro, models.build_model(micro.model))
  # An eager init, as plain_clip's: its op-by-op programs are compiled once per process, a jitted init every time.
  h_params, _ = half.init_variables(jax.random.key(0))
  chex.assert_trees_all_equal(h_params, params)  # float32 master weights
  batch, mesh = objective_batch(micro, size=16), parallel.make_mesh()
  loss, _, _, grads = _loss_and_grads(objective, params, state, batch, jax.random.key(0), 'none', 1, mesh)
  h_loss, _, _, h_grads = _loss_and_grads(half, params, state, batch, jax.random.key(0), 'decoupled', 2, mesh)
  assert h_loss.dtype == np.float32 and all(g.dtype == np.float32 for g in jax.tree.leaves(h_grads))
  np.testing.assert_allclose(h_loss, loss, rtol=2e-2)
  # Dtypes are fixed when the programs are traced: their shapes (jax.eval_shape) tell them without a compile.
  features, _ = jax.eval_shape(half.forward, params, state, batch, jax.random.key(0))
  assert features['zi'].dtype == jnp.float32  # the loss math runs in float32
  towers = jax.eval_shape(lambda p: half.encode_text(p, batch['text'], with_tokens=True)['tokens'], params)
  assert towers.dtype == jnp.bfloat16
