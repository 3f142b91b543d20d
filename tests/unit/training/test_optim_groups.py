"""Locked towers (config.optim.lock_image / lock_text, LiT) and layer-wise lr decay (config.optim.*_layer_decay): a
locked tower or group does not move through real train steps, in both block layouts, and holds no Adam moments (a
stacked leaf only partly locked holds them, the locked rows' staying 0); a locked ResNet keeps its BatchNorm
statistics; each parameter's update is scaled by decay ** (L + 1 - layer id); and the config keys are validated. The references below are written from the rules (open_clip's lock groups, BEiT's
layer ids), by parameter name, not with the code under test."""
import functools

import chex
import jax
import ml_collections
import numpy as np
import optax
import pytest

from support import build_objective, initial_state, jit_init, micro_config, run_steps
from vlp_jax import models, parallel
from vlp_jax.config import ConfigError, base_config, validate
from vlp_jax.models.transformer import unstacked_layout
from vlp_jax.training import optim

LAYERS = 3  # blocks per tower in these tests: with the scanned layout, blocks 0-1 stacked and block 2 its own
TEXT_ROOTS = ('token_embedding', 'positional_embedding', 'transformer', 'ln_final', 'text_projection')


def _names(path) -> tuple[str, ...]:
  return tuple(str(key.key) for key in path)


def _reference_tower(names):
  if names[0] == 'visual':
    return 'image'
  return 'text' if names[0] in TEXT_ROOTS else None


def _reference_position(names, final_norm):
  """A tower parameter's position from its unstacked name: 0 embeddings, i + 1 block i, then `final_norm` for
  ln_post / ln_final and LAYERS + 1 for the projection."""
  inner = names[1:] if names[0] == 'visual' else names
  if inner[0] in ('conv1', 'class_embedding', 'positional_embedding', 'ln_pre', 'token_embedding'):
    return 0
  if inner[0] == 'transformer':
    return int(inner[1].split('_')[1]) + 1
  return final_norm if inner[0] in ('ln_post', 'ln_final') else LAYERS + 1


def reference_lock_group(names):
  """open_clip's groups (VisionTransformer.lock, lock_text_tower): the last block shares its group with the final
  LayerNorm; the projection is a group of its own."""
  return _reference_position(names, final_norm=LAYERS)


def reference_multipliers(params, image_decay, text_decay):
  """{'a/b/c': lr multiplier} over the unstacked layout: decay ** (L + 1 - layer id), BEiT's layer ids (the final
  LayerNorm with the projection at L + 1); 1 outside the towers."""
  out = {}
  for path, _ in jax.tree_util.tree_leaves_with_path(params):
    names = _names(path)
    tower = _reference_tower(names)
    if tower is None:
      out['/'.join(names)] = 1.0
      continue
    decay = image_decay if tower == 'image' else text_decay
    out['/'.join(names)] = decay ** (LAYERS + 1 - _reference_position(names, final_norm=LAYERS + 1))
  return out


def _config(micro, scan=False, **optim_options):
  micro.model.vision.layers = micro.model.text.layers = LAYERS
  micro.model.scan_layers = scan
  micro.optim.warmup_steps = 0  # every step moves what trains (step 0 of a warmup from 0 has lr 0)
  micro.optim.update(optim_options)
  validate(micro)
  return micro


def _one_device():
  return parallel.make_mesh(1, jax.devices()[:1])


def _adam_state(opt_state) -> optax.ScaleByAdamState:
  is_adam = lambda s: isinstance(s, optax.ScaleByAdamState)  # noqa: E731
  return next(s for s in jax.tree.leaves(opt_state, is_leaf=is_adam) if is_adam(s))


def _changed(before, after) -> dict[str, bool]:
  """{'a/b/c': whether any entry differs}, over the unstacked layout (a scanned tree is unstacked first)."""
  before, after = unstacked_layout(jax.tree.map(np.asarray, before)), unstacked_layout(jax.tree.map(np.asarray, after))
  return {'/'.join(_names(path)): not np.array_equal(b, a)
          for (path, b), a in zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(after))}


def _tiny(scan=False):
  """A model config of LAYERS blocks per tower, for the optimizer tests that need parameters but no train step."""
  config = models.preset('tiny', scan_layers=scan, embed_dim=32)
  config.vision.update(layers=LAYERS, width=32, heads=2)
  config.text.update(layers=LAYERS, width=32, heads=2, context_length=16)
  return config


def _params(scan=False):
  return _initial_params(bool(scan))


@functools.lru_cache(maxsize=None)
def _initial_params(scan):
  """The `_tiny` model's initial parameters on the host, initialised once per layout for the tests of a worker
  (read-only: no test can change another's)."""
  model = models.build_model(_tiny(scan))
  params, _ = jit_init(lambda key: models.init_variables(model, key))(jax.random.key(0))

  def frozen(x):
    x = np.array(x)
    x.setflags(write=False)
    return x
  return jax.tree.map(frozen, params)


def _optim(**options):
  config = base_config().optim
  config.update(warmup_steps=0, **options)
  return config


def _random_like(tree, seed):
  leaves, treedef = jax.tree.flatten(tree)
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(treedef, [rng.normal(size=np.shape(x)).astype(np.float32) for x in leaves])


def _first_update(config, params, grads):
  """The optimizer's first update (host arrays) of `grads` at `params`."""
  tx = optim.make_optimizer(config, total_steps=10)
  updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
  return jax.tree.map(np.asarray, updates)


# ------------------------------------------------------------------------------------------------ locked towers


@pytest.mark.slow
@pytest.mark.parametrize('scan', [False, True])
def test_locked_image_tower_is_unchanged_by_training_and_has_no_moments(micro, scan):
  config = _config(micro, scan, lock_image=True)
  initial = initial_state(config)
  params, losses, state = run_steps(config, _one_device(), steps=3, state=initial)
  chex.assert_trees_all_equal(params['visual'], initial.params['visual'])  # bit for bit
  changed = _changed(initial.params, params)
  assert all(changed[name] for name in changed if _reference_tower(name.split('/')) != 'image'), changed
  assert np.all(np.isfinite(losses))
  adam = _adam_state(parallel.to_host(state.opt_state))
  for moments in (adam.mu, adam.nu):
    assert jax.tree.leaves(moments['visual']) == []  # not allocated: optax's empty MaskedNode in their place
    chex.assert_trees_all_equal_shapes(moments['transformer'], params['transformer'])


@pytest.mark.slow
@pytest.mark.parametrize('scan', [False, True])
def test_partly_unlocked_towers_train_exactly_their_unlocked_groups(micro, scan):
  # Image: the last 2 of its L + 2 groups (block 2 with ln_post, proj). Text: the last 3, so block 1 trains and block
  # 0 does not: in the scanned layout they are rows 1 and 0 of the same stacked leaves. Layer decay rides along in
  # the scanned case, so the whole chain runs in a real step.
  decay = {'text_layer_decay': 0.5} if scan else {}
  config = _config(micro, scan, lock_image=True, lock_image_unlocked_groups=2, lock_text=True,
                   lock_text_unlocked_layers=3, **decay)
  initial = initial_state(config)
  params, _, state = run_steps(config, _one_device(), steps=3, state=initial)
  unlocked = {'image': 2, 'text': 3}

  def trains(name):
    tower = _reference_tower(name.split('/'))
    return tower is None or reference_lock_group(name.split('/')) >= LAYERS + 2 - unlocked[tower]
  want = {name: trains(name) for name in _changed(initial.params, params)}
  assert _changed(initial.params, params) == want
  assert sum(want.values()) < len(want) and any(want[n] for n in want if n.startswith('transformer/resblocks_1/'))
  adam = _adam_state(parallel.to_host(state.opt_state))
  assert jax.tree.leaves(adam.mu['visual']['conv1']) == []  # a locked group: no moments
  assert jax.tree.leaves(adam.mu['visual']['proj']) != []
  if scan:
    # Blocks 0-1 of the image tower are both locked: the stacked leaf has no moments. The text tower's stacked leaf
    # trains its row 1 only: moments are allocated for both rows, and the locked row's stay exactly 0.
    assert jax.tree.leaves(adam.mu['visual']['transformer']['resblocks']) == []
    kernel = adam.mu['transformer']['resblocks']['mlp']['c_fc']['kernel']
    chex.assert_shape(kernel, (LAYERS - 1, 32, 128))
    assert not np.any(kernel[0]) and np.any(kernel[1])


@pytest.mark.slow
def test_locked_gradients_do_not_count_in_the_clipping_norm():
  """open_clip's frozen parameters have no gradient: a locked tower's gradient, however large, changes nothing of the
  other parameters' clipped updates."""
  params = _params()
  grads = _random_like(params, seed=3)
  huge = {**grads, 'visual': jax.tree.map(lambda g: 1e4 * g, grads['visual'])}
  zero = {**grads, 'visual': jax.tree.map(np.zeros_like, grads['visual'])}
  config = _optim(lock_image=True, grad_clip_norm=1.0)
  chex.assert_trees_all_equal(_first_update(config, params, huge), _first_update(config, params, zero))


def _resnet(config):
  """The micro ResNet tower of test_train_step.py."""
  config.model.vision.update(type='resnet', image_size=32, width=8, heads=2, stages=(1, 1, 1, 1))
  return config


@pytest.fixture(scope='module')
def locked_resnet(data_cache):
  """(config, initial host state) of the micro ResNet with its image tower locked: one init (a ResNet's is slow to
  compile) for the two tests below; the parameters do not depend on the lock."""
  config = _resnet(micro_config(data_cache))
  config.optim.update(lock_image=True, warmup_steps=0)
  validate(config)
  return config, initial_state(config)


@pytest.mark.slow
def test_locked_resnet_tower_keeps_its_weights_and_batch_norm_statistics(locked_resnet):
  config, initial = locked_resnet
  params, _, state = run_steps(config, _one_device(), steps=2, state=initial)
  chex.assert_trees_all_equal(params['visual'], initial.params['visual'])
  chex.assert_trees_all_equal(parallel.to_host(state.model_state), initial.model_state)
  assert not np.array_equal(params['text_projection'], initial.params['text_projection'])


@pytest.mark.slow
def test_locked_resnet_tower_runs_its_batch_norm_as_in_evaluation(micro, locked_resnet):
  """open_clip's FrozenBatchNorm2d normalises with the running statistics: the training forward of a locked ResNet
  equals its evaluation forward, while an unlocked one normalises with the batch's statistics."""
  config = _resnet(micro)
  objective, _ = build_objective(config)
  params, model_state = locked_resnet[1].params, locked_resnet[1].model_state  # the init of `config`'s model
  images = jax.random.normal(jax.random.key(1), (4, 32, 32, 3))
  evaluation = jax.jit(lambda p, s, x: objective.encode_image(p, s, x, train=False)[0]['embed'])(
      params, model_state, images)
  for lock in (False, True):
    config.optim.lock_image = lock
    objective, _ = build_objective(config)
    assert objective.freeze_image_batch_norm == lock
    out, new_state = jax.jit(lambda p, s, x: objective.encode_image(p, s, x, train=True))(params, model_state, images)
    if lock:
      np.testing.assert_array_equal(out['embed'], evaluation)
      chex.assert_trees_all_equal(new_state, model_state)
    else:
      assert not np.allclose(out['embed'], evaluation, atol=1e-3)


# ------------------------------------------------------------------------------------------------- layer decay


def _unstacked_full(values, params):
  """Per-leaf values (scalars, or [L-1, 1, ...] per-row vectors of stacked leaves) broadcast to the parameters'
  shapes, in the unstacked layout."""
  return unstacked_layout(jax.tree.map(lambda v, p: np.broadcast_to(v, p.shape), values, params))


@pytest.mark.parametrize('scan', [False, True])
def test_layer_decay_multipliers_follow_beit(scan):
  params = _params(scan)
  got = _unstacked_full(optim.layer_decay_scales(params, _optim(image_layer_decay=0.5, text_layer_decay=0.8)), params)
  want = reference_multipliers(unstacked_layout(params), 0.5, 0.8)
  for path, value in jax.tree_util.tree_leaves_with_path(got):
    np.testing.assert_allclose(value, want['/'.join(_names(path))], rtol=1e-7, err_msg=jax.tree_util.keystr(path))
  assert want['visual/conv1/kernel'] == 0.5**4 and want['transformer/resblocks_1/ln_1/scale'] == 0.8**2
  assert want['visual/ln_post/scale'] == want['text_projection'] == want['logit_scale'] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize('scan', [False, True])
def test_layer_decay_scales_the_adamw_update_by_the_multiplier(scan):
  """AdamW's update (its decoupled weight decay included) scales linearly with the lr: with decay, each parameter's
  update is the update without decay times its multiplier."""
  params = _params(scan)
  grads = _random_like(params, seed=1)
  plain = unstacked_layout(_first_update(_optim(), params, grads))
  decayed = unstacked_layout(_first_update(_optim(image_layer_decay=0.5, text_layer_decay=0.8), params, grads))
  want = reference_multipliers(unstacked_layout(params), 0.5, 0.8)
  for (path, got), base in zip(jax.tree_util.tree_leaves_with_path(decayed), jax.tree.leaves(plain)):
    np.testing.assert_allclose(got, base * np.float32(want['/'.join(_names(path))]), rtol=1e-6,
                               err_msg=jax.tree_util.keystr(path))
  assert np.abs(decayed['visual']['conv1']['kernel']).max() < 0.1 * np.abs(plain['visual']['conv1']['kernel']).max()


def test_decay_of_one_is_bit_identical_to_no_decay():
  params = _params()
  grads = _random_like(params, seed=2)
  plain = _first_update(_optim(), params, grads)
  text_only = _first_update(_optim(image_layer_decay=1.0, text_layer_decay=0.5), params, grads)
  chex.assert_trees_all_equal(text_only['visual'], plain['visual'])  # exactly, not to a tolerance
  assert not np.array_equal(text_only['token_embedding']['embedding'], plain['token_embedding']['embedding'])
  # At the defaults the optimizer is the plain clip + AdamW chain: the same state (checkpoints resume) and updates.
  tx = optax.chain(optax.adamw(optim.learning_rate_schedule(_optim(), 10), mask=optim.weight_decay_mask))
  default = optim.make_optimizer(_optim(), total_steps=10)
  assert jax.tree.structure(default.init(params)) == jax.tree.structure(tx.init(params))


# ------------------------------------------------------------------------------------------------------ config


def _refusal(config) -> str | None:
  """The message of the ConfigError `validate` raises for `config`; None when it accepts the config."""
  try:
    validate(config)
  except ConfigError as error:
    return str(error)
  return None


def test_tower_options_validate():
  # Each option at its limit is accepted and one step past it refused, naming the key: the limits are exactly there.
  config = base_config()
  assert (config.model.vision.layers, config.model.text.layers) == (4, 4)  # tiny: 6 groups per tower
  config.optim.update(lock_image=True, lock_image_unlocked_groups=6, lock_text=True, lock_text_unlocked_layers=2,
                      image_layer_decay=0.65, text_layer_decay=1.0)
  assert _refusal(config) is None
  for key, past in (('lock_image_unlocked_groups', 7), ('text_layer_decay', 1.001), ('lock_text', False)):
    beyond = config.copy_and_resolve_references()
    beyond.optim[key] = past
    assert f'config.optim.{key}' in (_refusal(beyond) or ''), key
  config = base_config()
  config.model = models.preset('RN50')
  config.optim.lock_image = True  # a ResNet locks whole...
  assert _refusal(config) is None
  config.optim.lock_image_unlocked_groups = 1  # ...having no layer groups to leave unlocked
  assert 'has no layer groups' in (_refusal(config) or '')


@pytest.mark.parametrize('options,message', [
    (dict(image_layer_decay=0.0), r'config.optim.image_layer_decay must be in \(0, 1\]'),
    (dict(text_layer_decay=1.5), r'config.optim.text_layer_decay must be in \(0, 1\]'),
    (dict(text_layer_decay=float('nan')), r'config.optim.text_layer_decay must be in'),
    (dict(lock_image=True, lock_image_unlocked_groups=-1), r'config.optim.lock_image_unlocked_groups must be an int'),
    (dict(lock_text=True, lock_text_unlocked_layers=1.5), r'config.optim.lock_text_unlocked_layers must be an integer'),
    (dict(lock_image=True, lock_image_unlocked_groups=7), r'lock_image_unlocked_groups=7 is more than the 6 layer'),
    (dict(lock_text_unlocked_layers=2), r'lock_text_unlocked_layers=2 applies only to a locked tower.*lock_text=True'),
    (dict(lock_image=True, lock_image_unlocked_groups=1, model='RN50'),
     r"lock_image_unlocked_groups=1: a config.model.vision.type='resnet' tower has no layer groups"),
    (dict(image_layer_decay=0.7, model='RN50'), r"image_layer_decay=0.7: a config.model.vision.type='resnet'"),
])
def test_invalid_tower_options_name_the_key(options, message):
  config = base_config()
  if 'model' in options:
    config.model = models.preset(options.pop('model'))
  config.optim = ml_collections.ConfigDict({**config.optim.to_dict(), **options})  # as a config file might
  with pytest.raises(ConfigError, match=message):
    validate(config)


def test_masks_and_multipliers_need_a_transformer_tower():
  """The optimizer refuses what validation refuses, should it be built from an unvalidated config."""
  model = models.build_model(_resnet(base_config()).model)
  params, _ = jax.eval_shape(lambda: models.init_variables(model, jax.random.key(0)))
  with pytest.raises(ValueError, match='lock_image_unlocked_groups needs a transformer image tower'):
    optim.trainable_masks(params, _optim(lock_image=True, lock_image_unlocked_groups=1))
  with pytest.raises(ValueError, match='image_layer_decay needs a transformer image tower'):
    optim.layer_decay_scales(params, _optim(image_layer_decay=0.5))
  masks = optim.trainable_masks(params, _optim(lock_image=True))
  assert not any(jax.tree.leaves(masks['visual'])) and all(jax.tree.leaves(masks['transformer']))
