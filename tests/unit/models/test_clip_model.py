"""Model layout (OpenAI names), sizes, causal text masking, EOT pooling and positional-embedding interpolation."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import assert_close_at_scale, jit_init
from vlp_jax import models
from vlp_jax.models.transformer import ACTIVATIONS, exact_gelu


def _flat_names(params):
  return {'.'.join(str(getattr(k, 'key', k)) for k in path) for path, _ in jax.tree_util.tree_leaves_with_path(params)}


@pytest.fixture(scope='module')
def micro_model():
  cfg = models.preset('tiny')
  cfg.embed_dim = 16
  cfg.vision.update(image_size=16, patch_size=4, width=16, layers=2, heads=2)
  cfg.text.update(context_length=12, width=16, layers=2, heads=2)
  model = models.build_model(cfg)
  return model, models.init_variables(model, jax.random.key(0))[0]


@pytest.mark.slow
def test_parameter_names_follow_openai_layout(micro_model):
  _, params = micro_model
  names = _flat_names(params)
  expected = {
      'visual.conv1.kernel', 'visual.class_embedding', 'visual.positional_embedding', 'visual.ln_pre.scale',
      'visual.transformer.resblocks_0.ln_1.scale', 'visual.transformer.resblocks_0.attn.in_proj.kernel',
      'visual.transformer.resblocks_0.attn.out_proj.bias', 'visual.transformer.resblocks_1.mlp.c_fc.kernel',
      'visual.transformer.resblocks_1.mlp.c_proj.kernel', 'visual.ln_post.bias', 'visual.proj',
      'token_embedding.embedding', 'positional_embedding', 'transformer.resblocks_1.ln_2.bias', 'ln_final.scale',
      'text_projection', 'logit_scale'}
  assert expected <= names
  assert not any('conv1.bias' in n for n in names)  # patch embedding without bias, as OpenAI
  assert params['transformer']['resblocks_0']['attn']['in_proj']['kernel'].shape == (16, 48)  # packed qkv


@pytest.mark.parametrize('name,millions', [('ViT-B-32', 151.277313), ('ViT-B-16', 149.620737),
                                           ('ViT-L-14', 427.616513), ('RN50', 102.007137)])
def test_preset_parameter_counts_match_openai(name, millions):
  model = models.build_model(models.preset(name))
  shapes = jax.eval_shape(lambda: models.init_variables(model, jax.random.key(0))[0])
  assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)) == round(millions * 1e6)


@pytest.mark.slow
def test_text_feature_is_causal_and_read_at_eot(micro_model):
  model, params = micro_model
  tokens = np.zeros((2, 12), np.int32)
  tokens[:, 0], tokens[:, 1:4], tokens[:, 4] = 49406, [[320, 1125, 539], [320, 1125, 539]], 49407
  tokens[1, 5:] = 1234  # changing tokens after the EOT must not change the feature
  out = model.apply({'params': params}, tokens, method=model.encode_text)
  np.testing.assert_allclose(out['embed'][0], out['embed'][1], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out['eot'], out['tokens'][:, 4], rtol=1e-6)
  tokens[1, 2] = 999  # a token before the EOT does change it
  out = model.apply({'params': params}, tokens, method=model.encode_text)
  assert np.abs(out['embed'][0] - out['embed'][1]).max() > 1e-4


@pytest.mark.slow
def test_too_long_text_is_rejected(micro_model):
  model, params = micro_model
  with pytest.raises(ValueError, match='context_length'):
    model.apply({'params': params}, np.ones((1, 13), np.int32), method=model.encode_text)


@pytest.mark.slow
def test_image_tower_shapes_and_other_resolutions(micro_model):
  model, params = micro_model
  out = model.apply({'params': params}, np.zeros((3, 16, 16, 3), np.float32), method=model.encode_image)
  assert out['embed'].shape == (3, 16) and out['tokens'].shape == (3, 16, 16) and out['cls'].shape == (3, 16)
  local = model.apply({'params': params}, np.zeros((2, 8, 8, 3), np.float32), method=model.encode_image)
  assert local['tokens'].shape == (2, 4, 16)  # interpolated positional embeddings for smaller crops


def test_activations():
  x = jnp.linspace(-3, 3, 7)
  np.testing.assert_allclose(ACTIVATIONS['quick_gelu'](x), x * jax.nn.sigmoid(1.702 * x), rtol=1e-6)
  np.testing.assert_allclose(ACTIVATIONS['gelu'](x), jax.nn.gelu(x, approximate=False), rtol=1e-6, atol=1e-7)
  assert not np.allclose(ACTIVATIONS['quick_gelu'](x), ACTIVATIONS['gelu'](x))


def test_unknown_preset():
  with pytest.raises(ValueError, match='valid choices'):
    models.preset('ViT-Z-99')


def test_exact_gelu_matches_the_erf_definition():
  x = np.linspace(-12, 12, 4001)
  want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
  # atol: in float32, 1 + erf(x / sqrt 2) cancels below x = -5 (as in torch's CPU kernel, the same formula).
  np.testing.assert_allclose(np.asarray(exact_gelu(jnp.asarray(x, jnp.float32))), want, rtol=2e-6, atol=1e-6)
  grad = jax.vmap(jax.grad(exact_gelu))(jnp.asarray(x, jnp.float32))
  want_grad = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
                        for v in x])
  np.testing.assert_allclose(np.asarray(grad), want_grad, rtol=1e-5, atol=1e-6)
  assert exact_gelu(jnp.ones(3, jnp.bfloat16)).dtype == jnp.bfloat16


def _pooling_config(remat):
  cfg = models.preset('tiny')
  cfg.embed_dim = 16
  cfg.vision.update(image_size=16, patch_size=4, width=32, layers=2, heads=2)
  cfg.text.update(context_length=12, width=32, layers=2, heads=2)
  cfg.remat = remat
  return cfg


@pytest.fixture(scope='module')
def pooling_params():
  """The parameters of `_pooling_config` (remat adds none: one init for both settings)."""
  model = models.build_model(_pooling_config(False))
  return jax.device_get(jit_init(lambda k: models.init_variables(model, k)[0])(jax.random.key(0)))


@pytest.mark.slow  # compiles the towers several times over
@pytest.mark.parametrize('remat', [False, True])
def test_pooled_outputs_without_tokens_are_the_same_and_cheaper(remat, pooling_params):
  """`with_tokens=False` runs the last block on the pooled row only ([cls], or each caption's EOT under the causal
  mask): the same embeddings and gradients as the full tower, and fewer FLOPs."""
  model = models.build_model(_pooling_config(remat))
  params = pooling_params
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.normal(size=(6, 16, 16, 3)), jnp.float32)
  tokens = np.zeros((6, 12), np.int32)
  for i, length in enumerate([2, 5, 11, 3, 7, 12]):  # EOT at every kind of position, the last one included
    tokens[i, :length - 1] = rng.integers(1, 49000, length - 1)
    tokens[i, length - 1] = 49407
  tokens = jnp.asarray(tokens)

  def towers(p, with_tokens):
    image = model.apply({'params': p}, images, False, with_tokens, method=model.encode_image)
    text = model.apply({'params': p}, tokens, with_tokens, method=model.encode_text)
    assert ('tokens' in image) == with_tokens and ('tokens' in text) == with_tokens
    return image['embed'], image['cls'], text['embed'], text['eot']

  def loss(p, with_tokens):
    outputs = towers(p, with_tokens)
    zi, _, zt, _ = outputs
    return jnp.sum(jnp.tanh(zi @ zt.T)), outputs

  # One compiled program per path gives its outputs (the loss's aux), its gradient and its FLOPs.
  grad = jax.jit(jax.grad(loss, has_aux=True), static_argnums=1)
  compiled = {w: grad.lower(params, w).compile() for w in (True, False)}
  (full_grad, full), (pooled_grad, pooled) = compiled[True](params), compiled[False](params)
  for got, want in zip(pooled, full):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert_close_at_scale(pooled_grad, full_grad)
  flops = [compiled[w].cost_analysis()['flops'] for w in (True, False)]
  assert flops[1] < 0.9 * flops[0], flops
