"""config.model.attention: the padded program cuDNN gets (rows padded to a multiple of 64, true lengths passed), run
through XLA on the CPU, equals today's unpadded attention and a naive numpy reference, in values and gradients, in a
block and in the whole CLIP model; the Pallas splash kernel (route 'pallas', run in Pallas' interpret mode on the CPU)
equals 'xla' too, and compiles for a TPU topology; 'auto' resolves per platform, dtype and head width, and leaves CPU
programs as they were."""
import importlib.util

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from benchmarks import aot
from support import assert_close_at_scale, jit_init, random_tokens
from vlp_jax import models, parallel
from vlp_jax.config import base_config, validate
from vlp_jax.errors import ConfigError
from vlp_jax.models.transformer import BlockStack, MultiHeadAttention, attention_route, self_attention

BATCH, HEADS, HEAD_DIM = 2, 3, 8
# (length, causal): the image tower's odd row count (ViT-B-16's 196 patches + [cls]) and CLIP's causal text rows.
CASES = {'image': (197, False), 'text': (77, True)}


def _qkv_and_cotangent(length: int, seed: int = 0) -> tuple[jax.Array, ...]:
  """q, k, v and an output cotangent, each [BATCH, length, HEADS, HEAD_DIM] float32 normal draws."""
  keys = jax.random.split(jax.random.key(seed), 4)
  return tuple(jax.random.normal(key, (BATCH, length, HEADS, HEAD_DIM)) for key in keys)


def _numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
  """[B, T, heads, d] each -> [B, T, heads, d]: softmax(q k^T / sqrt d) v per head in float64, later keys masked
  when causal."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  scores = np.einsum('bthd,bshd->bhts', q, k) / np.sqrt(q.shape[-1])
  if causal:
    length = q.shape[1]
    scores = np.where(np.tril(np.ones((length, length), bool)), scores, -np.inf)
  weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
  weights /= weights.sum(axis=-1, keepdims=True)
  return np.einsum('bhts,bshd->bthd', weights, v)


def _values_and_grads(route: str, q, k, v, cotangent, causal: bool):
  """(attention output, its vector-Jacobian product with `cotangent` wrt (q, k, v)) on `route`, jitted."""
  def run(q, k, v, cotangent):
    out, vjp = jax.vjp(lambda *qkv: self_attention(*qkv, causal, route, 64), q, k, v)
    return out, vjp(cotangent)

  return jax.jit(run)(q, k, v, cotangent)


@pytest.mark.parametrize('case', CASES)
def test_padded_attention_equals_xla_and_a_numpy_reference(case):
  length, causal = CASES[case]
  q, k, v, cotangent = _qkv_and_cotangent(length)
  want, want_grads = _values_and_grads('xla', q, k, v, cotangent, causal)
  got, got_grads = _values_and_grads('padded', q, k, v, cotangent, causal)
  assert got.shape == (BATCH, length, HEADS, HEAD_DIM)
  chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)
  chex.assert_trees_all_close(got_grads, want_grads, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(got, _numpy_attention(q, k, v, causal), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('case', CASES)
def test_pallas_attention_equals_xla_in_interpret_mode(case):
  """The splash kernel, interpreted on the CPU in fp32: rows padded to 128 (197 -> 256, 77 -> 128), the padding kept
  out by segment ids, causal for the text rows."""
  length, causal = CASES[case]
  q, k, v, cotangent = _qkv_and_cotangent(length, seed=1)
  want, want_grads = _values_and_grads('xla', q, k, v, cotangent, causal)
  got, got_grads = _values_and_grads('pallas', q, k, v, cotangent, causal)
  assert got.shape == (BATCH, length, HEADS, HEAD_DIM)
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-5)
  chex.assert_trees_all_close(got_grads, want_grads, rtol=1e-5, atol=1e-5)


def test_pallas_attention_under_a_mesh_runs_per_device_rows():
  """Under `jax.set_mesh` the kernel runs on each device's rows of the batch (shard_map), with the same values; a
  batch the devices do not divide is computed whole on each."""
  length, causal = CASES['text']
  q, k, v, _ = _qkv_and_cotangent(length, seed=2)
  want = self_attention(q, k, v, causal, 'xla')
  mesh = parallel.make_mesh(1, jax.devices()[:2])
  attend = jax.jit(lambda q, k, v: self_attention(q, k, v, causal, 'pallas'))
  with jax.set_mesh(mesh):
    sharded = attend(*(jax.device_put(x, NamedSharding(mesh, P(parallel.BATCH_AXES))) for x in (q, k, v)))
    odd = attend(q[:1], k[:1], v[:1])
  chex.assert_trees_all_close(sharded, want, rtol=1e-5, atol=1e-5)
  chex.assert_trees_all_close(odd, want[:1], rtol=1e-5, atol=1e-5)
  assert sharded.sharding.spec == P(parallel.BATCH_AXES)


@pytest.mark.slow  # libtpu compiles the forward and backward kernels: about 5 s
@pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                    reason='libtpu is not installed (pip install -e ".[tpu]")')
@pytest.mark.parametrize('case', CASES)
def test_pallas_attention_compiles_for_a_tpu_topology(case):
  """The gradient of bf16 attention with ViT-B's 12 heads of 64, its batch split over the 4 chips of a v5e:2x2 that
  libtpu describes without a TPU: the TPU kernels (Mosaic custom calls), not the interpreted ones, are compiled."""
  length, causal = CASES[case]
  mesh = parallel.make_mesh(1, aot.tpu_devices('v5e:2x2'))
  x = jax.ShapeDtypeStruct((8, length, 12, 64), jnp.bfloat16, sharding=NamedSharding(mesh, P(parallel.BATCH_AXES)))
  loss = lambda q, k, v: jnp.sum(self_attention(q, k, v, causal, 'pallas').astype(jnp.float32) ** 2)
  with jax.set_mesh(mesh):
    hlo = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x).compile().as_text()
  assert hlo.count('custom_call_target="tpu_custom_call"') == 3  # the forward, dq and dkv kernels
  assert 'all-gather' not in hlo  # each chip attends over its own rows


def test_padding_is_masked_by_the_true_length():
  """The lengths are what keeps the zero rows out: the same padded rows without them give other values (so the
  equalities above test the mask, not only the slicing)."""
  length, causal = CASES['image']
  q, k, v, _ = _qkv_and_cotangent(length)
  padding = ((0, 0), (0, -length % 64), (0, 0), (0, 0))
  unmasked = jax.nn.dot_product_attention(*(jnp.pad(x, padding) for x in (q, k, v)), is_causal=causal)[:, :length]
  assert float(jnp.abs(unmasked - self_attention(q, k, v, causal, 'padded', 64)).max()) > 1e-3


@pytest.mark.parametrize('requested,dtype,head_dim,backend,want', [
    ('auto', jnp.bfloat16, 64, 'cpu', 'xla'),
    ('auto', jnp.bfloat16, 64, 'tpu', 'xla'),  # 'pallas' only when asked for: no TPU has timed it
    ('auto', jnp.float32, 72, 'tpu', 'xla'),
    ('pallas', jnp.bfloat16, 64, 'tpu', 'pallas'),
    ('pallas', jnp.float32, 64, 'cpu', 'pallas'),  # interpret mode, for tests
    ('auto', jnp.bfloat16, 64, 'gpu', 'cudnn'),
    ('auto', jnp.float16, 64, 'gpu', 'cudnn'),
    ('auto', jnp.float32, 64, 'gpu', 'xla'),
    ('auto', jnp.bfloat16, 72, 'gpu', 'cudnn'),  # So400m: 1152 / 16, a multiple of 8
    ('auto', jnp.bfloat16, 80, 'gpu', 'cudnn'),  # ViT-H's image tower
    ('auto', jnp.bfloat16, 160, 'gpu', 'xla'),  # above cuDNN's 128
    ('auto', jnp.bfloat16, 36, 'gpu', 'xla'),  # not a multiple of 8
    ('auto', 'bfloat16', 64, 'gpu', 'cudnn'),  # a dtype by name
    ('xla', jnp.bfloat16, 64, 'gpu', 'xla'),
    ('padded', jnp.float32, 64, 'cpu', 'padded'),
    ('cudnn', jnp.bfloat16, 64, 'gpu', 'cudnn'),
])
def test_attention_route_resolves_each_case(requested, dtype, head_dim, backend, want):
  assert attention_route(requested, dtype, head_dim, backend) == want


def test_a_bad_attention_option_names_the_key():
  valid = r"\['auto', 'xla', 'padded', 'cudnn', 'pallas'\]"
  with pytest.raises(ConfigError, match=r"config.model.attention='flash'.*" + valid):
    attention_route('flash', jnp.float32, 64, 'gpu')
  with pytest.raises(ConfigError, match=r"config.model.attention='pallas' runs TPU kernels.*on a GPU use 'cudnn'"):
    attention_route('pallas', jnp.bfloat16, 64, 'gpu')
  with pytest.raises(ConfigError, match=r"config.model.attention='flash'"):
    BlockStack(attention='flash')
  with pytest.raises(ConfigError, match='config.model.attention_pad_multiple must be a positive integer'):
    BlockStack(attention='padded', attention_pad_multiple=0)
  config = base_config()
  validate(config)  # the defaults are valid
  config.model.attention = 'flash'
  with pytest.raises(ConfigError, match=r"config.model.attention='flash'"):
    validate(config)
  config.model.update(attention='cudnn', attention_pad_multiple=-64)
  with pytest.raises(ConfigError, match='config.model.attention_pad_multiple'):
    validate(config)


def test_auto_leaves_the_cpu_program_unchanged():
  """On the CPU 'auto' traces the very program 'xla' does (nothing padded), and 'padded' another one."""
  x = jnp.ones((BATCH, 17, 32))

  def program(attention: str) -> str:
    block = MultiHeadAttention(32, 2, 1, attention=attention)
    params = block.init(jax.random.key(0), x, False)
    return str(jax.make_jaxpr(lambda p: block.apply(p, x, False))(params))

  assert jax.default_backend() == 'cpu'
  assert program('auto') == program('xla')
  assert program('padded') != program('xla')


@pytest.fixture(scope='module')
def micro_models():
  """{route: CLIP model} for 'xla' and 'padded', at micro shapes (17 image rows, 16 text rows: both padded to 64;
  one block per tower, which computes every row: the outputs keep the tokens), the parameters they share and a
  batch."""
  config = models.preset('tiny')
  config.embed_dim = 16
  config.vision.update(image_size=16, patch_size=4, width=16, layers=1, heads=2)
  config.text.update(context_length=16, width=16, layers=1, heads=2)
  built = {}
  for route in ('xla', 'padded'):
    config.attention = route
    built[route] = models.build_model(config)
  params = jit_init(lambda rng: models.init_variables(built['xla'], rng)[0])(jax.random.key(0))
  rng = np.random.default_rng(0)
  images = rng.normal(size=(4, 16, 16, 3)).astype(np.float32)
  tokens = random_tokens(rng, (4,), 16, 9)
  return built, params, images, tokens


@pytest.mark.slow  # two gradient programs of the whole model: about 10 s on 2 cores
def test_clip_with_padded_attention_equals_xla(micro_models):
  """Both towers' embeddings and every parameter's gradient of a loss on them."""
  built, params, images, tokens = micro_models

  def embeddings_and_grads(model):
    def embed(p):
      image = model.apply({'params': p}, images, method=model.encode_image)['embed']
      text = model.apply({'params': p}, tokens, method=model.encode_text)['embed']
      return image, text

    def loss(p):
      image, text = embed(p)
      return jnp.sum(jnp.sin(image @ text.T))

    return jax.jit(lambda p: (embed(p), jax.grad(loss)(p)))(params)

  (image, text), grads = embeddings_and_grads(built['xla'])
  (p_image, p_text), p_grads = embeddings_and_grads(built['padded'])
  chex.assert_trees_all_close((p_image, p_text), (image, text), rtol=1e-5, atol=1e-6)
  assert_close_at_scale(p_grads, grads, rtol=1e-5)
