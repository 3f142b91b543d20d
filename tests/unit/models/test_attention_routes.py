"""config.model.attention: the padded program cuDNN gets (rows padded to an even count by default, or a multiple of
64, true lengths passed where the padding is not causally masked anyway), run through XLA on the CPU, equals today's
unpadded attention and a naive numpy reference, in values and gradients, on odd and even lengths, causal or not, in a
block and in the whole CLIP model; nothing is padded or passed for an even length; the probe of jax's cuDNN training
rule (cudnn_rule) reads this jax's bug and sees the fix; the Pallas splash kernel (route 'pallas', run in Pallas' interpret mode on the CPU)
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
from vlp_jax.models import cudnn_rule
from vlp_jax.models.transformer import BlockStack, MultiHeadAttention, attention_route, self_attention

BATCH, HEADS, HEAD_DIM = 2, 3, 8
# (length, causal): the image tower's odd row count (ViT-B-16's 196 patches + [cls]) and CLIP's causal text rows.
CASES = {'image': (197, False), 'text': (77, True)}
# odd and even lengths, causal and not, each with the default pad multiple (0: as little as cuDNN needs) and 64
PADDED_CASES = {f'{name}_{length}_pad{multiple}': (length, causal, multiple)
                for name, causal, lengths in (('image', False, (197, 196)), ('text', True, (77, 76)))
                for length in lengths for multiple in (0, 64)}


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


def _values_and_grads(route: str, q, k, v, cotangent, causal: bool, pad_multiple: int = 0):
  """(attention output, its vector-Jacobian product with `cotangent` wrt (q, k, v)) on `route`, jitted."""
  def run(q, k, v, cotangent):
    out, vjp = jax.vjp(lambda *qkv: self_attention(*qkv, causal, route, pad_multiple), q, k, v)
    return out, vjp(cotangent)

  return jax.jit(run)(q, k, v, cotangent)


@pytest.mark.parametrize('case', PADDED_CASES)
def test_padded_attention_equals_xla_and_a_numpy_reference(case):
  """Causal cases pass no lengths (the padded keys are in every real row's future): every real row, the text
  tower's pooled [eot] row among them, and every gradient still equals 'xla'."""
  length, causal, pad_multiple = PADDED_CASES[case]
  q, k, v, cotangent = _qkv_and_cotangent(length)
  want, want_grads = _values_and_grads('xla', q, k, v, cotangent, causal)
  got, got_grads = _values_and_grads('padded', q, k, v, cotangent, causal, pad_multiple)
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
  for bad in (-1, 2.0, True, '2'):
    with pytest.raises(ConfigError, match=r'config.model.attention_pad_multiple must be 0 .* or a positive integer'):
      BlockStack(attention='padded', attention_pad_multiple=bad)
  BlockStack(attention='padded', attention_pad_multiple=0)  # as little as cuDNN needs
  config = base_config()
  assert config.model.attention_pad_multiple == 0
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
  """{route: CLIP model} for 'xla' and 'padded', at micro shapes (17 image rows padded to 18, 16 text rows as they are;
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


def _attention_jaxpr(fn, length: int) -> str:
  x = jax.ShapeDtypeStruct((BATCH, length, HEADS, HEAD_DIM), jnp.float32)
  return str(jax.make_jaxpr(fn)(x, x, x))


@pytest.mark.parametrize('causal', (False, True))
def test_an_even_length_is_neither_padded_nor_given_lengths(causal):
  """At 196 rows the default 'padded' program is XLA's plain one (what cuDNN then gets: its plain or causal kernel,
  not the padding-mask variant); at 197 it pads one row, passing the lengths only where causality does not mask it."""
  xla = lambda q, k, v: self_attention(q, k, v, causal, 'xla')
  padded = lambda q, k, v: self_attention(q, k, v, causal, 'padded')
  assert _attention_jaxpr(padded, 196) == _attention_jaxpr(xla, 196)
  odd = _attention_jaxpr(padded, 197)
  assert f'{BATCH},198,{HEADS},{HEAD_DIM}' in odd and f'{BATCH},256,' not in odd

  def by_hand(q, k, v):  # one zero row, the true lengths passed only when not causal
    lengths = None if causal else jnp.full((BATCH,), 197, jnp.int32)
    pad = lambda x: jnp.pad(x, ((0, 0), (0, 1), (0, 0), (0, 0)))
    return jax.nn.dot_product_attention(pad(q), pad(k), pad(v), is_causal=causal, query_seq_lengths=lengths,
                                        key_value_seq_lengths=lengths, implementation='xla')[:, :197]

  assert odd == _attention_jaxpr(by_hand, 197)


@pytest.fixture
def fixed_cudnn_rule(monkeypatch):
  """jax's cuDNN training rule with the one-line fix of docs/scaling.md: its shape check told whether a bias was
  given (none is, in this library) instead of seeing the zero-size placeholder as one."""
  check = cudnn_rule._fused.check_is_flash_attention

  def fixed_check(query, key, value, layout, cudnn_version, has_bias, is_training, *rest, **options):
    return check(query, key, value, layout, cudnn_version, False, is_training, *rest, **options)

  cudnn_rule.cudnn_trains_odd_lengths.cache_clear()
  monkeypatch.setattr(cudnn_rule._fused, 'check_is_flash_attention', fixed_check)
  yield
  cudnn_rule.cudnn_trains_odd_lengths.cache_clear()


def test_the_probe_reads_this_jax_rule_as_refusing_odd_lengths():
  """jax 0.10.2 has the bug: the probe says so (even padding), though the rule traces fine at an even length (so the
  'no' is the bug, not a probe that cannot read the rule)."""
  cudnn_rule._trace_training_rule(4)
  with pytest.raises(NotImplementedError, match='Unsupported sequence length Q 3, KV 3'):
    cudnn_rule._trace_training_rule(3)
  assert cudnn_rule.cudnn_trains_odd_lengths() is False
  assert cudnn_rule.cudnn_pad_multiple() == 2


def test_with_the_fix_the_probe_unpads_the_rows(fixed_cudnn_rule):
  """Once the rule accepts odd lengths, pad multiple 0 pads nothing: 197 rows go as they are, no lengths."""
  assert cudnn_rule.cudnn_trains_odd_lengths() is True
  assert cudnn_rule.cudnn_pad_multiple() == 1
  xla = lambda q, k, v: self_attention(q, k, v, False, 'xla')
  padded = lambda q, k, v: self_attention(q, k, v, False, 'padded')
  assert _attention_jaxpr(padded, 197) == _attention_jaxpr(xla, 197)
