"""Pre-LN transformer blocks laid out as OpenAI CLIP (`ln_1`, `attn.in_proj`, `attn.out_proj`, `ln_2`, `mlp.c_fc`,
`mlp.c_proj`), so that OpenAI / open_clip weights map onto these parameters by name."""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

try:  # Pallas' TPU kernels ship with jax but move between releases: every other route runs without them
  from jax.experimental.pallas.ops.tpu import splash_attention as splash
except ImportError as error:
  splash, _SPLASH_IMPORT_ERROR = None, f'{type(error).__name__}: {error}'

from vlp_jax.errors import ConfigError
from vlp_jax.parallel import BATCH_AXES, SCANNED_BLOCKS
from vlp_jax.registry import Registry

_INV_SQRT2 = 1 / math.sqrt(2)
LN_EPS = 1e-5  # OpenAI CLIP's LayerNorm eps (Flax's default is 1e-6)


def quick_gelu(x: jax.Array) -> jax.Array:
  """OpenAI CLIP's activation: x * sigmoid(1.702 x)."""
  return x * jax.nn.sigmoid(1.702 * x)


def exact_gelu(x: jax.Array) -> jax.Array:
  """x * Phi(x) = x (1 + erf(x / sqrt 2)) / 2: torch's nn.GELU() formula. XLA's CPU lowering of
  jax.nn.gelu(approximate=False) goes through erfc: about 3x slower forward and 1.4x slower backward, for values
  equal to 1e-6 (erfc is more accurate where the result is below 1e-6, which no activation notices)."""
  return 0.5 * x * (1.0 + jax.lax.erf(x * _INV_SQRT2))  # Python floats: x keeps its dtype (bf16 stays bf16)


ACTIVATIONS: Registry[Callable[[jax.Array], jax.Array]] = Registry('activation', 'model.act')
ACTIVATIONS.add('quick_gelu', quick_gelu)
ACTIVATIONS.add('gelu', exact_gelu)
# SigLIP's (transformers' 'gelu_pytorch_tanh', big_vision's default): the tanh approximation of GELU.
ACTIVATIONS.add('gelu_tanh', lambda x: jax.nn.gelu(x, approximate=True))


def layer_norm(name: str, dtype: Any, eps: float = LN_EPS) -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=eps, dtype=dtype, name=name)


# How self-attention runs (`config.model.attention`, docs/scaling.md). 'xla': XLA's unfused matmul-softmax-matmul on
# the T rows as they are. 'padded': the rows padded to a multiple of `config.model.attention_pad_multiple` with the
# true length passed, through XLA: the program cuDNN gets, runnable anywhere. 'cudnn': that program through cuDNN's
# fused kernel (which refuses odd lengths such as 197, hence the padding). 'pallas': jax's Pallas splash-attention
# kernel for TPUs, the rows padded to its 128-row blocks (on the CPU the same kernel in Pallas' interpret mode, for
# tests). 'auto': 'cudnn' on a GPU or 'pallas' on a TPU where the kernel applies, else 'xla'.
ATTENTION_ROUTES = ('auto', 'xla', 'padded', 'cudnn', 'pallas')
_IMPLEMENTATION = {'padded': 'xla', 'cudnn': 'cudnn'}  # jax.nn.dot_product_attention's `implementation` per route
_CUDNN_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
_CUDNN_MAX_HEAD_DIM = 128
_PALLAS_BLOCK = 128  # splash attention's default query and key block: the rows are padded to a multiple of it


def check_attention(requested: Any, pad_multiple: Any = 64) -> None:
  """Raise ConfigError naming the key when `config.model.attention` / `attention_pad_multiple` is invalid."""
  if requested not in ATTENTION_ROUTES:
    raise ConfigError(f'config.model.attention={requested!r} is not valid; valid choices: {list(ATTENTION_ROUTES)}')
  if not isinstance(pad_multiple, int) or isinstance(pad_multiple, bool) or pad_multiple < 1:
    raise ConfigError(f'config.model.attention_pad_multiple must be a positive integer (64 for cuDNN), got '
                      f'{pad_multiple!r}')


def attention_route(requested: str, dtype: Any, head_dim: int, backend: str) -> str:
  """The route ('xla', 'padded', 'cudnn' or 'pallas') that `config.model.attention=requested` takes for heads of
  `head_dim` channels computed in `dtype` on `backend` (jax.default_backend()). 'auto' is 'cudnn' where cuDNN's fused
  kernel applies (a GPU, bf16/fp16, head_dim a multiple of 8 and at most 128), else 'xla'; the others are taken as
  named. 'pallas' is not an 'auto' choice on TPUs: it compiles there (ahead of time, benchmarks/RESULTS.md), but no
  TPU has measured whether it is faster than 'xla' with the rows padded to 128."""
  check_attention(requested)
  if requested == 'pallas' and backend == 'gpu':
    raise ConfigError("config.model.attention='pallas' runs TPU kernels (and, slowly, the same kernels on the CPU "
                      "for tests); on a GPU use 'cudnn' or 'auto'")
  if requested == 'pallas' and splash is None:
    raise ConfigError(f"config.model.attention='pallas' needs jax's Pallas splash-attention kernel, which this jax "
                      f"does not have ({_SPLASH_IMPORT_ERROR}); use 'xla'")
  if requested != 'auto':
    return requested
  dtype = jnp.dtype(dtype)
  if backend == 'gpu' and dtype in _CUDNN_DTYPES and head_dim % 8 == 0 and head_dim <= _CUDNN_MAX_HEAD_DIM:
    return 'cudnn'
  return 'xla'


def _splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, interpret: bool) -> jax.Array:
  """q, k, v [B, T, heads, head_dim] -> [B, T, heads, head_dim] through the Pallas splash kernel.

  The rows are padded with zeros to a multiple of the kernel's 128-row block. Segment ids keep the padding out: the
  real rows are segment 0 and attend only to real rows, the padding is segment 1 (it attends to itself, so no row
  is left with nothing to attend to). `interpret` runs the kernel as ordinary jax ops (any backend, slowly).
  """
  _, length, heads, head_dim = q.shape
  padded = length + -length % _PALLAS_BLOCK
  padding = ((0, 0), (0, padded - length), (0, 0), (0, 0))
  # The kernel takes [heads, T, head_dim] per example and applies no 1/sqrt(d) scale: scale the queries.
  q = q * jnp.asarray(head_dim**-0.5, q.dtype)
  q, k, v = (jnp.pad(x, padding).transpose(0, 2, 1, 3) for x in (q, k, v))
  mask = splash.CausalMask((padded, padded)) if causal else splash.FullMask((padded, padded))
  kernel = splash.make_splash_mha_single_device(splash.MultiHeadMask([mask] * heads), interpret=interpret)
  segments = (jnp.arange(padded) >= length).astype(jnp.int32)
  segment_ids = splash.SegmentIds(q=segments, kv=segments)
  out = jax.vmap(lambda q, k, v: kernel(q, k, v, segment_ids=segment_ids))(q, k, v)
  return out.transpose(0, 2, 1, 3)[:, :length]


def pallas_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool) -> jax.Array:
  """q, k, v [B, T, heads, head_dim] -> [B, T, heads, head_dim] through the splash kernel: compiled for a TPU,
  interpreted when the program is lowered for the CPU (which platform is known only at lowering: an ahead-of-time
  compile for a TPU topology traces on a CPU host).

  Under a mesh (`jax.set_mesh`) the kernel runs per device on its rows of the batch (`shard_map`): XLA cannot
  partition a Pallas call (the TPU compile stops with 'Mosaic kernels cannot be automatically partitioned').
  """
  def attend(q, k, v):
    return jax.lax.platform_dependent(q, k, v, tpu=lambda *qkv: _splash_attention(*qkv, causal, False),
                                      cpu=lambda *qkv: _splash_attention(*qkv, causal, True))

  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return attend(q, k, v)
  shards = math.prod(mesh.shape[axis] for axis in BATCH_AXES)
  spec = P(BATCH_AXES) if q.shape[0] % shards == 0 else P()  # an odd batch: every device computes all of it
  # check_vma=False: the splash kernel's output shapes carry no varying-axes annotation, which the check requires.
  return jax.shard_map(attend, in_specs=(spec,) * 3, out_specs=spec, check_vma=False)(q, k, v)


def self_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, route: str,
                   pad_multiple: int = 64, lengths: jax.Array | None = None) -> jax.Array:
  """Every row's query against every row's keys and values (the later rows masked when `causal`):
  q, k, v [B, T, heads, head_dim] -> [B, T, heads, head_dim].

  route 'xla': the T rows as they are. 'padded' / 'cudnn': the rows padded with zeros to a multiple of
  `pad_multiple`, and T passed as every example's query and key length, which masks the padding (cuDNN's padding
  mask, no bias tensor); the padded rows are then dropped. 'pallas': `pallas_attention`, padded to its own 128-row
  blocks (`pad_multiple` is not used). The same values as 'xla' up to rounding.

  `lengths` [B] int (NaFlex: each example's real rows, the padding after them): every route but 'pallas' masks the
  rows past an example's length as keys (their own outputs are finite and meaningless); None: every row is real.
  """
  if lengths is not None and route == 'pallas':
    raise ConfigError("config.model.attention='pallas' does not take per-example lengths (NaFlex images); use "
                      "'xla', 'padded', 'cudnn' or 'auto'")
  if route == 'xla':
    if lengths is None:
      return jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, query_seq_lengths=lengths,
                                        key_value_seq_lengths=lengths)
  if route == 'pallas':
    return pallas_attention(q, k, v, causal)
  batch, length = q.shape[:2]
  padding = ((0, 0), (0, -length % pad_multiple), (0, 0), (0, 0))
  if lengths is None:
    lengths = jnp.full((batch,), length, jnp.int32)
  out = jax.nn.dot_product_attention(*(jnp.pad(x, padding) for x in (q, k, v)), is_causal=causal,
                                     query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                     implementation=_IMPLEMENTATION[route])
  return out[:, :length]


class MultiHeadAttention(nn.Module):
  """Self-attention with a packed qkv projection `in_proj` ([w, 3w] + bias) and `out_proj`."""
  width: int
  heads: int
  layers: int  # of the whole tower, for the output-projection init
  dtype: Any = jnp.float32
  attention: str = 'auto'  # ATTENTION_ROUTES, resolved by `attention_route` at trace time
  attention_pad_multiple: int = 64

  @nn.compact
  def __call__(self, x: jax.Array, causal: bool, query_index: jax.Array | None = None,
               lengths: jax.Array | None = None) -> jax.Array:
    """x: [B, T, w] -> [B, T, w]; with `query_index` [B] int, the output at that row alone, [B, 1, w] (its query
    against every row's keys and values; `causal` then masks the keys after it). `lengths` [B]: each example's real
    rows, the keys past them masked (`self_attention`)."""
    if self.width % self.heads:
      raise ValueError(f'width {self.width} is not divisible by heads {self.heads}')
    batch, length, _ = x.shape
    head_dim = self.width // self.heads
    qkv = nn.Dense(3 * self.width, dtype=self.dtype, name='in_proj',
                   kernel_init=nn.initializers.normal(self.width**-0.5))(x)
    q, k, v = jnp.split(qkv.reshape(batch, length, 3 * self.heads, head_dim), 3, axis=2)
    if query_index is None:
      route = attention_route(self.attention, self.dtype, head_dim, jax.default_backend())
      out = self_attention(q, k, v, causal, route, self.attention_pad_multiple, lengths)
    else:  # one query per example (the pooled last block): XLA's call whatever the route
      q = jnp.take_along_axis(q, query_index[:, None, None, None], axis=1)  # [B, 1, heads, head_dim]
      mask = (jnp.arange(length)[None, :] <= query_index[:, None])[:, None, None, :] if causal else None
      if lengths is not None:
        real = (jnp.arange(length)[None, :] < lengths[:, None])[:, None, None, :]
        mask = real if mask is None else mask & real
      out = jax.nn.dot_product_attention(q, k, v, mask=mask)
    out = out.reshape(batch, q.shape[1], self.width)
    proj_std = self.width**-0.5 * (2 * self.layers)**-0.5
    return nn.Dense(self.width, dtype=self.dtype, name='out_proj',
                    kernel_init=nn.initializers.normal(proj_std))(out)


class Mlp(nn.Module):
  width: int
  layers: int
  act: str
  dtype: Any = jnp.float32
  hidden: int = 0  # the hidden layer's width; 0 = 4 * width (SigLIP So400m: 4304 for 1152)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [B, T, w] -> [B, T, w] through a hidden layer of `hidden` (default 4w) units."""
    h = nn.Dense(self.hidden or 4 * self.width, dtype=self.dtype, name='c_fc',
                 kernel_init=nn.initializers.normal((2 * self.width)**-0.5))(x)
    h = ACTIVATIONS.get(self.act)(h)
    proj_std = self.width**-0.5 * (2 * self.layers)**-0.5
    return nn.Dense(self.width, dtype=self.dtype, name='c_proj', kernel_init=nn.initializers.normal(proj_std))(h)


class ResidualAttentionBlock(nn.Module):
  width: int
  heads: int
  layers: int
  act: str
  dtype: Any = jnp.float32
  mlp_width: int = 0  # Mlp.hidden
  ln_eps: float = LN_EPS
  attention: str = 'auto'  # MultiHeadAttention's
  attention_pad_multiple: int = 64

  @nn.compact
  def __call__(self, x: jax.Array, causal: bool, query_index: jax.Array | None = None,
               lengths: jax.Array | None = None) -> jax.Array:
    """x: [B, T, w] -> [B, T, w]; with `query_index` [B] int, only that row, [B, 1, w] (see `Transformer`);
    `lengths` [B]: each example's real rows (the attention ignores the others)."""
    attended = MultiHeadAttention(self.width, self.heads, self.layers, self.dtype, self.attention,
                                  self.attention_pad_multiple, name='attn')(
        layer_norm('ln_1', self.dtype, self.ln_eps)(x), causal, query_index, lengths)
    if query_index is not None:
      x = jnp.take_along_axis(x, query_index[:, None, None], axis=1)
    x = x + attended
    mlp = Mlp(self.width, self.layers, self.act, self.dtype, self.mlp_width, name='mlp')
    return x + mlp(layer_norm('ln_2', self.dtype, self.ln_eps)(x))


# What a rematerialised block keeps from its forward pass for the backward pass (`config.model.remat_policy`; the
# rest is recomputed). jax.checkpoint_policies' names: 'nothing_saveable' keeps only each block's input (the least
# memory, one extra forward pass); 'dots_saveable' keeps every matmul output (recomputes only the elementwise ops:
# LayerNorm, GELU, softmax); 'dots_with_no_batch_dims_saveable' keeps the projections' outputs but not the attention
# matmuls, whose [B, heads, T, T] scores are what grows with the sequence.
REMAT_POLICIES: Registry[Callable] = Registry('remat policy', 'model.remat_policy')
for _name in ('nothing_saveable', 'dots_saveable', 'dots_with_no_batch_dims_saveable'):
  REMAT_POLICIES.add(_name, getattr(jax.checkpoint_policies, _name))


@dataclasses.dataclass(frozen=True)
class BlockStack:
  """How a tower runs its stack of blocks (`config.model.remat`, `remat_policy`, `scan_layers`, `attention`,
  `attention_pad_multiple`); the same values whatever is chosen (up to rounding for `attention`).

  remat: recompute block activations in the backward pass instead of keeping them, keeping what `remat_policy`
    names (REMAT_POLICIES).
  scan: run the blocks before the last as one `jax.lax.scan` over stacked parameters (`resblocks`, leading axis
    [layers - 1]) instead of unrolling them: the compiler sees one block, so compile time and program size no
    longer grow with depth. The last block stays its own (`resblocks_{layers-1}`): a pooled tower computes only
    its pooled row there. `stacked_layout`/`unstacked_layout` convert parameter trees between the two layouts.
  attention: how self-attention runs (ATTENTION_ROUTES; `attention_route`), padding the rows to a multiple of
    `attention_pad_multiple` on the 'padded' and 'cudnn' routes (`self_attention`).
  """
  remat: bool = False
  remat_policy: str = 'nothing_saveable'
  scan: bool = False
  attention: str = 'auto'
  attention_pad_multiple: int = 64

  def __post_init__(self):
    check_attention(self.attention, self.attention_pad_multiple)

  @classmethod
  def from_config(cls, model_config: Any) -> 'BlockStack':
    return cls(remat=bool(model_config.get('remat', False)),
               remat_policy=model_config.get('remat_policy', 'nothing_saveable'),
               scan=bool(model_config.get('scan_layers', False)), attention=model_config.get('attention', 'auto'),
               attention_pad_multiple=model_config.get('attention_pad_multiple', 64))


class Transformer(nn.Module):
  """A stack of blocks named `resblocks_{i}` (OpenAI: `resblocks.{i}`), or with `stack.scan` the blocks before the
  last stacked under `resblocks` (see BlockStack)."""
  width: int
  layers: int
  heads: int
  act: str
  dtype: Any = jnp.float32
  stack: BlockStack = BlockStack()
  mlp_width: int = 0  # each block's MLP hidden width; 0 = 4 * width
  ln_eps: float = LN_EPS

  @nn.compact
  def __call__(self, x: jax.Array, causal: bool = False, pool_index: jax.Array | None = None,
               lengths: jax.Array | None = None) -> jax.Array:
    """x: [B, T, w] -> [B, T, w]; with `pool_index` [B] int, the output row at that index alone, [B, 1, w].
    `lengths` [B] int: each example's real rows, padding after them (NaFlex images), which no attention reads.

    A tower whose output is one pooled token (CLIP's [cls] or [eot] embedding) needs nothing else of the last block:
    it then computes that row's query, attention, output projection and MLP only (every row's keys and values
    still), the same values for about three quarters less of the last block's work.
    """
    block = ResidualAttentionBlock
    block_options = (self.width, self.heads, self.layers, self.act, self.dtype, self.mlp_width, self.ln_eps,
                     self.stack.attention, self.stack.attention_pad_multiple)
    if self.stack.remat:
      # static_argnums counts `self` as 0: `causal` (argument 2) picks the attention mask at trace time. Inside a
      # scan the common-subexpression guard is not needed (scan already keeps recomputation apart) and costs speed.
      block = nn.remat(block, static_argnums=(2,), policy=REMAT_POLICIES.get(self.stack.remat_policy),
                       prevent_cse=not self.stack.scan)
    first = 0
    if self.stack.scan and self.layers > 1:
      first = self.layers - 1
      if lengths is None:
        scanned = nn.scan(lambda module, carry, _: (module(carry, causal), None), variable_axes={'params': 0},
                          split_rngs={'params': True}, length=first)
        x, _ = scanned(block(*block_options, name=SCANNED_BLOCKS), x, None)
      else:  # the lengths are the same for every block: broadcast, not scanned over
        scanned = nn.scan(lambda module, carry, lengths: (module(carry, causal, None, lengths), None),
                          variable_axes={'params': 0}, split_rngs={'params': True}, in_axes=nn.broadcast,
                          length=first)
        x, _ = scanned(block(*block_options, name=SCANNED_BLOCKS), x, lengths)
    for i in range(first, self.layers):
      x = block(*block_options, name=f'resblocks_{i}')(
          x, causal, pool_index if i == self.layers - 1 else None, lengths)
    return x


_BLOCK_NAME = re.compile(r'^resblocks_(\d+)$')


def _is_block_stack(tree: Any) -> bool:
  return isinstance(tree, dict) and any(key == SCANNED_BLOCKS or _BLOCK_NAME.match(key) for key in tree)


def _restack(tree: Any, convert: Callable[[dict], dict]) -> Any:
  """`tree` with `convert` applied to every dict holding a Transformer's blocks; dicts, lists, tuples, named tuples
  (optax states) and dataclasses (a TrainState) are walked, other leaves kept."""
  if isinstance(tree, dict):
    return convert(tree) if _is_block_stack(tree) else {k: _restack(v, convert) for k, v in tree.items()}
  if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
    return dataclasses.replace(tree, **{f.name: _restack(getattr(tree, f.name), convert)
                                        for f in dataclasses.fields(tree) if f.init})
  if isinstance(tree, tuple) and hasattr(tree, '_fields'):
    return type(tree)(*(_restack(v, convert) for v in tree))
  if isinstance(tree, (list, tuple)):
    return type(tree)(_restack(v, convert) for v in tree)
  return tree


def _stack_blocks(blocks: dict) -> dict:
  indices = sorted(int(_BLOCK_NAME.match(k).group(1)) for k in blocks if _BLOCK_NAME.match(k))
  if SCANNED_BLOCKS in blocks or len(indices) < 2:
    return blocks  # already stacked, or a single block (nothing to scan)
  last = indices[-1]
  rest = {k: v for k, v in blocks.items() if not _BLOCK_NAME.match(k)}
  stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *(blocks[f'resblocks_{i}'] for i in range(last)))
  return {**rest, SCANNED_BLOCKS: stacked, f'resblocks_{last}': blocks[f'resblocks_{last}']}


def _unstack_blocks(blocks: dict) -> dict:
  if SCANNED_BLOCKS not in blocks:
    return blocks
  stacked = blocks[SCANNED_BLOCKS]
  count = len(jax.tree.leaves(stacked)[0])
  rest = {k: v for k, v in blocks.items() if k != SCANNED_BLOCKS}
  return {**rest, **{f'resblocks_{i}': jax.tree.map(lambda leaf: leaf[i], stacked) for i in range(count)}}


def stacked_layout(tree: Any) -> Any:
  """A parameter tree (or any tree holding parameter-shaped dicts: optimizer states) in the scanned layout: in each
  transformer, `resblocks_0 .. resblocks_{L-2}` become `resblocks` with a leading [L-1] axis. Host arrays; a tree
  already stacked is returned as it is."""
  return _restack(tree, _stack_blocks)


def unstacked_layout(tree: Any) -> Any:
  """The inverse of `stacked_layout`: `resblocks_{i}` for every block (OpenAI's layout, what weight files name)."""
  return _restack(tree, _unstack_blocks)


def in_layout(tree: Any, stack: BlockStack) -> Any:
  """`tree` in the layout a model with `stack` expects."""
  return stacked_layout(tree) if stack.scan else unstacked_layout(tree)
