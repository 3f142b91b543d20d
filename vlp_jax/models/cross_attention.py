"""COSMOS's cross-attention module (student only): a query embedding attends to the other modality's tokens.

h = q + MHA(LN(q), LN(Linear(tokens))): one multi-head attention (8 heads, width = embed dim) with LayerNorm on the
query and on the keys/values, no MLP. Tokens are mapped to the embed dim by a Linear first.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlp_jax.models.transformer import layer_norm


class CrossAttention(nn.Module):
  embed_dim: int
  heads: int = 8
  zero_init_output: bool = False  # then h == q at initialisation (distillation of the plain CLS / EOT embeddings)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, query: jax.Array, tokens: jax.Array, token_mask: jax.Array | None = None,
               return_weights: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
    """query: [B, Q, d]; tokens: [B, T, w]; token_mask: [B, T] True where a token may be attended -> [B, Q, d].

    With `return_weights`, also the attention weights [B, heads, Q, T] (float32, each row sums to 1 over T), for
    visualisation; the output is the same either way.
    """
    if self.embed_dim % self.heads:
      raise ValueError(f'embed_dim {self.embed_dim} is not divisible by {self.heads} heads')
    head_dim = self.embed_dim // self.heads
    kv = nn.Dense(self.embed_dim, dtype=self.dtype, name='token_proj')(tokens)
    q = layer_norm('ln_q', self.dtype)(query)
    kv = layer_norm('ln_kv', self.dtype)(kv)

    def heads(x, name):
      x = nn.Dense(self.embed_dim, dtype=self.dtype, name=name)(x)
      return x.reshape(*x.shape[:2], self.heads, head_dim)

    q, k, v = heads(q, 'q_proj'), heads(kv, 'k_proj'), heads(kv, 'v_proj')
    mask = None if token_mask is None else token_mask[:, None, None, :]  # [B, 1 (heads), 1 (queries), T]
    out = jax.nn.dot_product_attention(q, k, v, mask=mask)
    out = out.reshape(*query.shape[:2], self.embed_dim)
    init = nn.initializers.zeros if self.zero_init_output else nn.initializers.lecun_normal()
    out = query + nn.Dense(self.embed_dim, dtype=self.dtype, kernel_init=init, name='out_proj')(out)
    if not return_weights:
      return out
    return out, attention_weights(q, k, mask)


def attention_weights(q: jax.Array, k: jax.Array, mask: jax.Array | None = None) -> jax.Array:
  """q: [B, Q, H, D], k: [B, T, H, D], mask: broadcastable to [B, H, Q, T] -> [B, H, Q, T] float32 softmax weights,
  as jax.nn.dot_product_attention computes them (scale 1 / sqrt(D), masked keys get 0)."""
  logits = jnp.einsum('bqhd,bthd->bhqt', q.astype(jnp.float32), k.astype(jnp.float32)) / jnp.sqrt(q.shape[-1])
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(logits, axis=-1)
