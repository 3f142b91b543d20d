"""CLIP: an image tower (towers.VISION_TOWERS: a ViT, vit.py, or a ResNet, resnet.py) and a causal text tower,
with parameters named as in OpenAI CLIP checkpoints.

Parameter tree (OpenAI name in brackets where it differs only by '.' -> '_'):
  visual/{conv1, class_embedding, positional_embedding, ln_pre, transformer/resblocks_i, ln_post, proj}
  token_embedding, positional_embedding, transformer/resblocks_i, ln_final, text_projection, logit_scale

SigLIP's text tower is the same tower with options of `config.model.text`: `causal=False` (bidirectional
attention), `pool='last'` (the feature read at the last position, not at the EOT token), `proj_bias=True` (adds
`text_projection_bias`), `mlp_width` and `ln_eps`; `config.model.init_logit_bias` (not None) adds a learned
`logit_bias`, the sigmoid loss's bias, so that it travels with the weights. The image tower comes from
`config.model.vision.type` ('vit', 'resnet', 'siglip_vit').

`text.embedding_grad` picks how the token table's gradient is summed (`embed_tokens`); every choice gives the same
forward pass and the same gradient up to summation order.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vlp_jax.models.towers import DTYPES, VISION_TOWERS, with_tower_defaults
from vlp_jax.models.transformer import LN_EPS, BlockStack, Transformer, layer_norm


# How the token table's gradient is summed over a batch's positions (`embed_tokens`):
#   'scatter': the gather's own transpose, one scatter-add over every position. On a GPU the padding positions'
#     (zero) gradients all pile their atomic adds onto the pad token's row.
#   'sorted': positions sorted by token id, then a sorted segment sum (no two threads add into one row at once).
#   'drop_after_eot': positions after the pooled one left out of the scatter where they cannot reach the output (a
#     causal tower whose later rows are not returned, `with_tokens=False`); elsewhere every position, as 'scatter'.
EMBEDDING_GRADS = ('scatter', 'sorted', 'drop_after_eot')


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _lookup(table: jax.Array, ids: jax.Array, keep: jax.Array, grad: str, vocab: int) -> jax.Array:
  """table: [V, w]; ids, keep: [N] -> [N, w], the rows of `ids`; `grad` and `keep` shape the backward pass only."""
  del keep, grad, vocab
  return jnp.take(table, ids, axis=0)


def _lookup_fwd(table, ids, keep, grad, vocab):
  return _lookup(table, ids, keep, grad, vocab), (ids, keep)


def _lookup_bwd(grad, vocab, residuals, cotangent):
  """The table's gradient ([V, w], the cotangent's dtype), summed as `grad` says; none for the ids and mask."""
  ids, keep = residuals
  if grad == 'sorted':
    order = jnp.argsort(ids)
    table_grad = jax.ops.segment_sum(cotangent[order], ids[order], vocab, indices_are_sorted=True)
  else:  # 'drop_after_eot': the left-out positions go to an index past the table, which the scatter drops
    table_grad = jnp.zeros((vocab, cotangent.shape[-1]), cotangent.dtype).at[jnp.where(keep, ids, vocab)].add(
        cotangent, mode='drop')
  no_grad = np.zeros(ids.shape, jax.dtypes.float0)
  return table_grad, no_grad, no_grad


_lookup.defvjp(_lookup_fwd, _lookup_bwd)


def embed_tokens(table: jax.Array, tokens: jax.Array, grad: str = 'scatter', keep: jax.Array | None = None
                 ) -> jax.Array:
  """table: [V, w]; tokens: [B, L] int -> [B, L, w], the table's rows. grad: one of EMBEDDING_GRADS; keep: [B, L]
  bool, the positions whose gradient can be nonzero (None: all), used by 'drop_after_eot' only."""
  if grad == 'scatter':
    return jnp.take(table, tokens, axis=0)
  keep = jnp.ones(tokens.shape, bool) if keep is None else keep
  rows = _lookup(table, tokens.reshape(-1), keep.reshape(-1), grad, table.shape[0])
  return rows.reshape(*tokens.shape, table.shape[1])


class CLIP(nn.Module):
  """Two towers and a learnable log logit scale. The text tower sits at the top level, as in OpenAI's layout."""
  embed_dim: int
  vision: ml_collections.FrozenConfigDict
  text: ml_collections.FrozenConfigDict
  act: str = 'gelu'
  dtype: Any = jnp.float32
  init_logit_scale: float = math.log(1 / 0.07)
  stack: BlockStack = BlockStack()  # remat and scan of both towers' transformer blocks
  init_logit_bias: float | None = None  # a learned logit bias (SigLIP) when not None

  def setup(self):
    v, t = self.vision, self.text
    self.visual = VISION_TOWERS.get(v.type).build(v, self.embed_dim, self.act, self.dtype, self.stack)
    self.token_embedding = nn.Embed(t.vocab_size, t.width, embedding_init=nn.initializers.normal(0.02),
                                    dtype=self.dtype)
    self.positional_embedding = self.param('positional_embedding', nn.initializers.normal(0.01),
                                           (t.context_length, t.width))
    ln_eps = t.get('ln_eps', LN_EPS)
    self.transformer = Transformer(t.width, t.layers, t.heads, self.act, self.dtype, self.stack,
                                   t.get('mlp_width', 0), ln_eps)
    self.ln_final = layer_norm('ln_final', self.dtype, ln_eps)
    self.text_projection = self.param('text_projection', nn.initializers.normal(t.width**-0.5),
                                      (t.width, self.embed_dim))
    if t.get('proj_bias', False):
      self.text_projection_bias = self.param('text_projection_bias', nn.initializers.zeros, (self.embed_dim,))
    self.logit_scale = self.param('logit_scale', nn.initializers.constant(self.init_logit_scale), ())
    if self.init_logit_bias is not None:
      self.logit_bias = self.param('logit_bias', nn.initializers.constant(self.init_logit_bias), ())

  def encode_image(self, images: jax.Array, train: bool = False, with_tokens: bool = True,
                   rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """images: [B, H, W, 3] -> {'embed': [B, d] (not normalised), 'cls': [B, w], 'tokens': [B, N, w]}.

    `train` switches BatchNorm (ResNet towers) to batch statistics; under jit over the global batch these are
    statistics of the global batch. `with_tokens=False` leaves out `tokens`, which a ViT then does not compute in
    its last block (the same `embed` and `cls`, cheaper). `rng`: None or, when training, [B] keys, one per image,
    for the tower's stochastic options (towers.py).
    """
    return self.visual(images, train=train, with_tokens=with_tokens, rng=rng)

  def encode_text(self, tokens: jax.Array, with_tokens: bool = True, rng: jax.Array | None = None
                  ) -> dict[str, jax.Array]:
    """tokens: [B, L] int, L <= context_length -> {'embed': [B, d], 'eot': [B, w], 'tokens': [B, L, w]}.

    The feature is read at the EOT token, the position of the largest id in each row (CLIP's BPE gives EOT the
    largest id), or with `text.pool='last'` at position L - 1 (SigLIP: captions padded to the context length).
    `eot` is that row, whichever it is. `with_tokens=False` leaves out `tokens`, and the last block computes the
    pooled row only (the same `embed` and `eot`, cheaper). `rng`: None,
    or [B] keys, one per caption, given only when training: a stochastic option of the text tower draws caption
    i's randomness from rng[i] alone, as an image tower's (towers.py). The text tower has none: it ignores them.
    """
    del rng  # no stochastic option in the text tower
    length = tokens.shape[1]
    if length > self.text.context_length:
      raise ValueError(f'text of length {length} exceeds the model context_length {self.text.context_length}')
    if self.text.get('pool', 'eot') == 'last':
      eot_index = jnp.full(tokens.shape[:1], length - 1, jnp.int32)
    else:
      eot_index = jnp.argmax(tokens, axis=-1)
    causal = self.text.get('causal', True)
    grad = self.text.get('embedding_grad', 'scatter')
    if grad == 'scatter':
      x = self.token_embedding(tokens)
    else:
      # a causal tower that returns the pooled row alone: later positions cannot reach it, their gradient is zero
      keep = jnp.arange(length)[None] <= eot_index[:, None] if causal and not with_tokens else None
      with jax.named_scope('token_embedding'):  # the profile's op metadata files it as the embedding
        x = embed_tokens(jnp.asarray(self.token_embedding.embedding, self.dtype), tokens, grad, keep)
    x = x + self.positional_embedding[:length].astype(self.dtype)
    x = self.ln_final(self.transformer(x, causal=causal, pool_index=None if with_tokens else eot_index))
    eot = jnp.take_along_axis(x, eot_index[:, None, None], axis=1)[:, 0] if with_tokens else x[:, 0]
    embed = eot @ self.text_projection.astype(x.dtype)
    if self.text.get('proj_bias', False):
      embed = embed + self.text_projection_bias.astype(x.dtype)
    out = {'embed': embed, 'eot': eot}
    return {**out, 'tokens': x} if with_tokens else out

  def __call__(self, images: jax.Array, tokens: jax.Array, train: bool = False
               ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """Both towers; used for initialisation."""
    return self.encode_image(images, train), self.encode_text(tokens)


def build_model(model_config: ml_collections.ConfigDict) -> CLIP:
  return CLIP(embed_dim=model_config.embed_dim,
              vision=ml_collections.FrozenConfigDict(with_tower_defaults(model_config.vision)),
              text=ml_collections.FrozenConfigDict(model_config.text),
              act=model_config.act, dtype=DTYPES.get(model_config.dtype),
              init_logit_scale=model_config.init_logit_scale, stack=BlockStack.from_config(model_config),
              init_logit_bias=model_config.get('init_logit_bias', None))


def init_variables(model: CLIP, rng: jax.Array) -> tuple[dict, dict]:
  """(params, model_state): float32 parameters and the non-trained collections (BatchNorm `batch_stats`; empty
  for ViT models), each a plain nested dict."""
  v, t = model.vision, model.text
  images = jnp.zeros((1, v.image_size, v.image_size, 3), jnp.float32)
  tokens = jnp.zeros((1, t.context_length), jnp.int32)
  variables = dict(model.init(rng, images, tokens))
  return variables.pop('params'), variables
