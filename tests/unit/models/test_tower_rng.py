"""Tower randomness (objectives/base.py, models/towers.py): when training, the towers get one key per example, and
none at eval; the deterministic towers give the same features whatever the keys; a stochastic tower, defined as a
tower option would be (one module under its own `vision.type`: conftest's noisy_vision_tower), draws per example, so
every objective hands each view or crop a key of its own (and decoupled accumulation stays exact for it: CLIP, SLIP
and COSMOS train the noisy tower in test_accumulation.py's decoupled-gradient test)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import objective_batch
from vlp_jax import models, objectives
from vlp_jax.config import with_term
from vlp_jax.models.towers import VISION_TOWERS
from vlp_jax.objectives.base import example_rngs, tower_rngs

BATCH = 32


def _configure(config, setup, tower='vit'):
  config.model.vision.type = tower
  config.objective.name = 'clip' if setup == 'saco' else setup
  if setup == 'saco':
    config.data.teacher_embeddings = '/unused/the/batch/carries/teacher.npz'
    with_term(config, 'saco', alpha=2.0, beta=1.5)
  if setup == 'slip':
    config.objective.update(head_mlp_dim=64, head_out_dim=16)
  if setup == 'cosmos':
    config.objective.update(num_local_crops=2, num_local_texts=2, local_crop_size=8, local_text_context_length=8,
                            cross_attention_heads=2)
  if setup == 'siglip2':  # micro heads: the defaults' 65,536 prototypes make its (zero) late features the cost
    config.objective.update(num_local_crops=2, local_crop_size=8, head_hidden_dim=16, head_bottleneck_dim=8,
                            head_prototypes=12)
  return config


def _build(config, setup, tower='vit'):
  config = _configure(config, setup, tower)
  objective = objectives.build(config, models.build_model(config.model))
  # Eager: its op-by-op programs are compiled once per process (a jitted init compiles again for every test).
  params, state = objective.init_variables(jax.random.key(0))
  return objective, params, state, objective_batch(config, BATCH)


def _differ(a, b, by=1e-3):
  return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(jax.tree.leaves(a),
                                                                                   jax.tree.leaves(b))) > by


@pytest.mark.slow
def test_a_stochastic_tower_gets_one_key_per_image_when_training_and_none_at_eval(micro, noisy_vision_tower):
  objective, params, state, batch = _build(micro, 'clip', 'noisy')
  images = jnp.asarray(batch['image'])
  keys, other = example_rngs(jax.random.key(1), BATCH), example_rngs(jax.random.key(2), BATCH)
  encode = jax.jit(lambda x, r, train: objective.encode_image(params, state, x, train, rng=r)[0]['embed'],
                   static_argnums=2)
  first = encode(images, keys, True)
  chex.assert_trees_all_equal(encode(images, keys, True), first)  # a function of the keys
  assert _differ(encode(images, other, True), first)  # other keys, other noise
  # Per example: an image's noise comes from its own key, whichever images share the call.
  np.testing.assert_allclose(encode(images[:8], keys[:8], True), first[:8], atol=2e-5)
  np.testing.assert_allclose(encode(images[::-1], keys[::-1], True), first[::-1], atol=2e-5)
  # At eval the tower gets no keys (it asserts so), given or not, and is deterministic.
  plain = encode(images, None, False)
  chex.assert_trees_all_equal(encode(images, keys, False), plain)
  assert _differ(first, plain)
  # `features` hands the image tower keys derived from the step's: different steps, different noise.
  features = jax.jit(lambda r: objective.features(params, state, objective.prepared(batch, r), example_rngs(r, BATCH),
                                                  True)[0])
  step_a, step_b = features(jax.random.key(3)), features(jax.random.key(4))
  chex.assert_trees_all_equal(features(jax.random.key(3)), step_a)
  assert _differ(step_a['zi'], step_b['zi'])
  chex.assert_trees_all_equal(step_a['zt'], step_b['zt'])  # the text tower is deterministic


def test_tower_keys_are_per_row_tower_and_crop():
  rng = example_rngs(jax.random.key(0), 8)
  assert rng.shape == (8,)
  np.testing.assert_array_equal(jax.random.key_data(example_rngs(jax.random.key(0), 16)[:8]),
                                jax.random.key_data(rng))  # row i's key does not depend on the batch size
  data = lambda keys: np.asarray(jax.random.key_data(keys)).reshape(-1, 2)  # noqa: E731
  image, text, crops = tower_rngs(rng, 0), tower_rngs(rng, 1), tower_rngs(rng, 0, crops=3)
  assert image.shape == (8,) and crops.shape == (8, 3)
  every = np.concatenate([data(rng), data(image), data(text), data(crops)])
  assert len({tuple(k) for k in every}) == len(every)  # no two rows, towers or crops share a key
  assert tower_rngs(None, 0) is None


@pytest.mark.slow
@pytest.mark.parametrize('setup', [*objectives.OBJECTIVES.names(), 'saco'])
def test_deterministic_towers_give_the_same_features_whatever_the_keys(micro, setup):
  """The registered towers have no stochastic option: the keys change nothing (bit for bit), for every objective."""
  objective, params, state, batch = _build(micro, setup)
  prepared = objective.prepared(batch, jax.random.key(5))
  # One program computes the features with the keys and without (compiled once, not twice): if the keys change
  # nothing, XLA merges the two identical computations; if they changed anything, the outputs would differ.
  with_and_without_keys = jax.jit(lambda r: (objective.features(params, state, prepared, r, True),
                                             objective.features(params, state, prepared, None, True)))
  got, want = with_and_without_keys(example_rngs(jax.random.key(1), BATCH))
  chex.assert_trees_all_equal(got, want)
  got, _ = with_and_without_keys(example_rngs(jax.random.key(2), BATCH))
  chex.assert_trees_all_equal(got, want)


@pytest.mark.slow  # compiles the towers several times over
def test_slip_views_keep_their_keys_fused_or_not(micro, noisy_vision_tower, monkeypatch):
  """SLIP embeds its three views in one call (no BatchNorm) or one call each: the same keys per view either way."""
  objective, params, state, batch = _build(micro, 'slip', 'noisy')
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  keys = tower_rngs(example_rngs(jax.random.key(1), BATCH), 0, crops=3)
  fused, _ = objective.encode_views(params, state, batch, True, keys)
  monkeypatch.setattr(type(objective), 'fuse_views', staticmethod(lambda *_: False))
  separate, _ = objective.encode_views(params, state, batch, True, keys)
  chex.assert_trees_all_close(fused, separate, atol=2e-5)
  other, _ = objective.encode_views(params, state, batch, True, keys[::-1])
  assert all(_differ(a['embed'], b['embed']) for a, b in zip(fused, other))  # every view is noisy


@pytest.mark.slow  # compiles the towers several times over
def test_cosmos_global_crops_keep_their_keys_in_one_call_or_two(micro, noisy_vision_tower, monkeypatch):
  """COSMOS embeds a ViT's first global crops apart from the others, any other tower's in one call: the same keys
  per crop either way."""
  objective, params, state, batch = _build(micro, 'cosmos', 'noisy')  # 'noisy' is not 'vit': one call
  images = jnp.asarray(batch['global_images'][:8])
  keys = tower_rngs(example_rngs(jax.random.key(1), 8), 0, crops=2)
  one_call, _ = objective._embed_global_images(params, state, images, True, keys)
  monkeypatch.setitem(VISION_TOWERS, 'vit', noisy_vision_tower)  # the same noisy tower under 'vit': the split path
  config = _configure(micro, 'cosmos', 'vit')
  split = objectives.build(config, models.build_model(config.model))  # runs on `params`: no init of its own
  two_calls, _ = split._embed_global_images(params, state, images, True, keys)
  chex.assert_trees_all_close(two_calls, one_call, atol=2e-5)
  other, _ = objective._embed_global_images(params, state, images, True, keys[:, ::-1])
  assert all(_differ(one_call['embed'][:, c], other['embed'][:, c]) for c in range(2))  # every crop is noisy
