"""SigLIP's towers (models/siglip_vit.py and the text tower's SigLIP options): attention pooling against a numpy
reference, a bidirectional text tower read at its last position, scanned blocks equal to unrolled ones, patch
dropout without a class token, and the layer groups the optimizer's per-tower rules read."""
import chex
import jax
import numpy as np
import pytest

from vlp_jax import models
from vlp_jax.models import groups
from vlp_jax.models.transformer import stacked_layout
from vlp_jax.objectives.base import example_rngs


def _config(scan=False, patch_dropout=0.0):
  config = models.preset('ViT-B-16-SigLIP', scan_layers=scan, embed_dim=32)
  config.vision.update(image_size=16, patch_size=4, width=32, layers=3, heads=4, mlp_width=40,
                       patch_dropout=patch_dropout)
  config.text.update(context_length=8, width=32, layers=3, heads=4, vocab_size=50, mlp_width=40)
  return config


def _params(config):
  params = jax.jit(lambda: models.init_variables(models.build_model(config), jax.random.key(0))[0])()
  # Non-trivial values everywhere (biases and LayerNorm shifts start at zero).
  rng = np.random.default_rng(1)
  return jax.tree.map(lambda x: np.asarray(x) + np.float32(0.05) * rng.standard_normal(x.shape, np.float32), params)


def _image_fn(config, train=False):
  """A jitted encode_image of the config's model: (params, images, rng) -> the tower's outputs."""
  model = models.build_model(config)
  return jax.jit(lambda p, x, r: model.apply({'params': p}, x, train, True, r, method=model.encode_image))


def _text_fn(config, with_tokens=True):
  model = models.build_model(config)
  return jax.jit(lambda p, t: model.apply({'params': p}, t, with_tokens=with_tokens, method=model.encode_text))


def _layer_norm(x, scale, bias, eps=1e-6):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale + bias


@pytest.mark.slow
def test_attention_pooling_matches_a_numpy_reference():
  config = _config()
  params = _params(config)
  images = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype(np.float32)
  out = _image_fn(config)(params, images, None)
  tokens, pool = np.asarray(out['tokens'], np.float64), jax.tree.map(lambda a: np.asarray(a, np.float64),
                                                                      params['visual']['attn_pool'])
  width, heads = 32, 4
  w, b = pool['attn']['in_proj']['kernel'], pool['attn']['in_proj']['bias']
  q = pool['probe'][0] @ w[:, :width] + b[:width]  # [1, w]: the probe's query
  k, v = tokens @ w[:, width:2 * width] + b[width:2 * width], tokens @ w[:, 2 * width:] + b[2 * width:]
  split = lambda x: x.reshape(*x.shape[:-1], heads, width // heads)  # noqa: E731
  scores = np.einsum('qhd,bkhd->bhqk', split(q), split(k)) / np.sqrt(width // heads)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  attended = np.einsum('bhqk,bkhd->bqhd', weights, split(v)).reshape(2, 1, width)
  h = attended @ pool['attn']['out_proj']['kernel'] + pool['attn']['out_proj']['bias']
  hidden = _layer_norm(h, pool['ln']['scale'], pool['ln']['bias']) @ pool['mlp']['c_fc']['kernel'] \
      + pool['mlp']['c_fc']['bias']
  gelu = 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))  # tanh GELU
  want = (h + gelu @ pool['mlp']['c_proj']['kernel'] + pool['mlp']['c_proj']['bias'])[:, 0]
  np.testing.assert_allclose(np.asarray(out['embed']), want, atol=1e-5)
  assert 'class_embedding' not in params['visual'] and 'proj' not in params['visual']
  chex.assert_shape(params['visual']['positional_embedding'], (16, 32))  # patches only


@pytest.mark.slow
def test_text_is_bidirectional_and_read_at_the_last_position():
  config = _config()
  params = _params(config)
  tokens = np.random.default_rng(0).integers(0, 50, size=(3, 8)).astype(np.int32)
  full, pooled = _text_fn(config), _text_fn(config, with_tokens=False)
  encode = lambda t, with_tokens=True: (full if with_tokens else pooled)(params, t)  # noqa: E731
  out = encode(tokens)
  np.testing.assert_array_equal(out['eot'], out['tokens'][:, -1])
  want = np.asarray(out['eot']) @ params['text_projection'] + params['text_projection_bias']
  np.testing.assert_allclose(out['embed'], want, atol=1e-5)
  np.testing.assert_allclose(encode(tokens, with_tokens=False)['embed'], out['embed'], atol=1e-5)
  # Bidirectional: a token after position 0 changes position 0's state (a causal tower's would not move).
  changed = tokens.copy()
  changed[:, 5] = (changed[:, 5] + 1) % 50
  assert np.abs(np.asarray(encode(changed)['tokens'][:, 0] - out['tokens'][:, 0])).max() > 1e-4


@pytest.mark.slow
def test_scanned_siglip_towers_equal_the_unrolled_ones():
  unrolled, scanned = _config(), _config(scan=True)
  params = _params(unrolled)
  images = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype(np.float32)
  tokens = np.random.default_rng(1).integers(0, 50, size=(2, 8)).astype(np.int32)

  def towers(config, p):
    return _image_fn(config)(p, images, None)['embed'], _text_fn(config)(p, tokens)['embed']
  chex.assert_trees_all_close(towers(scanned, stacked_layout(params)), towers(unrolled, params), rtol=2e-5, atol=2e-5)


@pytest.mark.slow
def test_patch_dropout_keeps_k_patches_and_leaves_evaluation_alone():
  config = _config(patch_dropout=0.5)
  params = _params(config)
  images = np.random.default_rng(0).normal(size=(4, 16, 16, 3)).astype(np.float32)
  rng = example_rngs(jax.random.key(3), 4)
  train_fn = _image_fn(config, train=True)
  train = train_fn(params, images, rng)
  chex.assert_shape(train['tokens'], (4, 8, 32))  # no class token: K = 8 of the 16 patches
  np.testing.assert_array_equal(_image_fn(config)(params, images, None)['embed'],
                                _image_fn(_config())(params, images, None)['embed'])
  # An image's kept patches come from its own key: alone, it gives the same result.
  alone = train_fn(params, images[2:3], rng[2:3])
  np.testing.assert_allclose(alone['embed'], train['embed'][2:3], atol=1e-6)


def test_the_pooling_head_and_projection_bias_sit_in_the_last_layer_group():
  params = _params(_config())
  ids = jax.tree_util.tree_map_with_path(lambda path, _: groups.tower_of(path), params)
  assert set(jax.tree.leaves(ids['visual']['attn_pool'])) == {groups.IMAGE}
  assert ids['text_projection_bias'] == groups.TEXT and ids['logit_bias'] is None
  layer = lambda path: int(groups.layer_ids(path, 3))  # noqa: E731
  prefixed = jax.tree_util.tree_map_with_path(
      lambda path, _: layer((jax.tree_util.DictKey('visual'), jax.tree_util.DictKey('attn_pool'), *path)),
      params['visual']['attn_pool'])
  assert set(jax.tree.leaves(prefixed)) == {3 + 1}  # L + 1 in a 3-block tower: with the projection it replaces
  assert layer((jax.tree_util.DictKey('text_projection_bias'),)) == 3 + 1
  assert layer((jax.tree_util.DictKey('visual'), jax.tree_util.DictKey('conv1'), jax.tree_util.DictKey('bias'))) == 0
