"""Pre-LN transformer blocks laid out as OpenAI CLIP (`ln_1`, `attn.in_proj`, `attn.out_proj`, `ln_2`, `mlp.c_fc`,
`mlp.c_proj`), so that OpenAI / open_clip weights map onto these parameters by name."""
from __future__ import annotations

import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

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


def layer_norm(name: str, dtype: Any) -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=LN_EPS, dtype=dtype, name=name)


class MultiHeadAttention(nn.Module):
  """Self-attention with a packed qkv projection `in_proj` ([w, 3w] + bias) and `out_proj`."""
  width: int
  heads: int
  layers: int  # of the whole tower, for the output-projection init
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, causal: bool, query_index: jax.Array | None = None) -> jax.Array:
    """x: [B, T, w] -> [B, T, w]; with `query_index` [B] int, the output at that row alone, [B, 1, w] (its query
    against every row's keys and values; `causal` then masks the keys after it)."""
    if self.width % self.heads:
      raise ValueError(f'width {self.width} is not divisible by heads {self.heads}')
    batch, length, _ = x.shape
    head_dim = self.width // self.heads
    qkv = nn.Dense(3 * self.width, dtype=self.dtype, name='in_proj',
                   kernel_init=nn.initializers.normal(self.width**-0.5))(x)
    q, k, v = jnp.split(qkv.reshape(batch, length, 3 * self.heads, head_dim), 3, axis=2)
    if query_index is None:
      out = jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    else:
      q = jnp.take_along_axis(q, query_index[:, None, None, None], axis=1)  # [B, 1, heads, head_dim]
      mask = (jnp.arange(length)[None, :] <= query_index[:, None])[:, None, None, :] if causal else None
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

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [B, T, w] -> [B, T, w] through a 4w hidden layer."""
    h = nn.Dense(4 * self.width, dtype=self.dtype, name='c_fc',
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

  @nn.compact
  def __call__(self, x: jax.Array, causal: bool, query_index: jax.Array | None = None) -> jax.Array:
    """x: [B, T, w] -> [B, T, w]; with `query_index` [B] int, only that row, [B, 1, w] (see `Transformer`)."""
    attended = MultiHeadAttention(self.width, self.heads, self.layers, self.dtype, name='attn')(
        layer_norm('ln_1', self.dtype)(x), causal, query_index)
    if query_index is not None:
      x = jnp.take_along_axis(x, query_index[:, None, None], axis=1)
    x = x + attended
    return x + Mlp(self.width, self.layers, self.act, self.dtype, name='mlp')(layer_norm('ln_2', self.dtype)(x))


class Transformer(nn.Module):
  """A stack of blocks named `resblocks_{i}` (OpenAI: `resblocks.{i}`).

  remat: recompute each block's activations in the backward pass instead of keeping them (same parameters and
  results; trades about one extra forward pass for activation memory).
  """
  width: int
  layers: int
  heads: int
  act: str
  dtype: Any = jnp.float32
  remat: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, causal: bool = False, pool_index: jax.Array | None = None) -> jax.Array:
    """x: [B, T, w] -> [B, T, w]; with `pool_index` [B] int, the output row at that index alone, [B, 1, w].

    A tower whose output is one pooled token (CLIP's [cls] or [eot] embedding) needs nothing else of the last block:
    it then computes that row's query, attention, output projection and MLP only (every row's keys and values
    still), the same values for about three quarters less of the last block's work.
    """
    # static_argnums counts `self` as 0: `causal` (argument 2) picks the attention mask at trace time.
    block = nn.remat(ResidualAttentionBlock, static_argnums=(2,)) if self.remat else ResidualAttentionBlock
    for i in range(self.layers):
      x = block(self.width, self.heads, self.layers, self.act, self.dtype, name=f'resblocks_{i}')(
          x, causal, pool_index if i == self.layers - 1 else None)
    return x
