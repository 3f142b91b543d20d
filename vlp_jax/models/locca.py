"""LocCa's decoder (arXiv 2403.19596; SigLIP 2, arXiv 2502.14786 §2.2): a transformer decoder over task token
sequences (data/text/locca_tasks.py) that cross-attends to the image tower's un-pooled tokens. Training only: SigLIP 2
drops it after pre-training, and nothing exports it.

Each block, pre-LayerNorm as the towers (transformer.py):
  x += SelfAttention(LN(x))           causal, or full for a row predicted in parallel
  x += CrossAttention(LN(x), image)   cross_attention.CrossAttention (LayerNorm on the keys and values too)
  x += Mlp(LN(x))
then LN and a linear map to the output vocabulary. SigLIP 2 shapes it as the text tower (width, heads, MLP) with half
its layers (`decoder_for_text_tower`).

Parallel prediction (CapPa, arXiv 2306.07915, as big_vision's cappa decoder does it): in a flagged row every input id
becomes MASK (an input-only embedding row, id = the output vocabulary size) and self-attention is not causal, so
all ids are predicted at once from the image alone; the targets are the same.

The output projection is its own matrix, not the transpose of the token embedding: big_vision's CapPa decoder, the
code LocCa and SigLIP 2 build on, keeps a separate, zero-initialised logits layer, and the input table has a row (MASK)
the output has not. Zero initialisation starts every prediction at the uniform distribution (loss log V).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlp_jax.models.cross_attention import CrossAttention
from vlp_jax.models.transformer import LN_EPS, Mlp, layer_norm

# Where an objective keeps the decoder's parameters (a top-level entry of its params), so that evaluators find them;
# weight export keeps only the towers' entries and so drops it.
PARAMS_NAME = 'locca_decoder'
# Where a decoder over a part of the tokenizer's vocabulary keeps which part (data/text/locca_tasks.py `text_ids`): a
# variables collection {'text_ids': [K] int32} beside 'params' (in training, an entry of the model state).
VOCABULARY_NAME = 'locca_vocabulary'


class MaskedSelfAttention(nn.Module):
  """Self-attention with a packed qkv projection (`in_proj`) and a per-row attention mask."""
  width: int
  heads: int
  layers: int  # of the whole decoder, for the output projection's init
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    """x: [S, L, w]; mask: [S, 1, L, L] bool, True where query t may attend to key u -> [S, L, w]."""
    if self.width % self.heads:
      raise ValueError(f'decoder width {self.width} is not divisible by heads {self.heads}')
    rows, length, _ = x.shape
    qkv = nn.Dense(3 * self.width, dtype=self.dtype, name='in_proj',
                   kernel_init=nn.initializers.normal(self.width**-0.5))(x)
    q, k, v = jnp.split(qkv.reshape(rows, length, 3 * self.heads, self.width // self.heads), 3, axis=2)
    out = jax.nn.dot_product_attention(q, k, v, mask=mask).reshape(rows, length, self.width)
    proj_std = self.width**-0.5 * (2 * self.layers)**-0.5
    return nn.Dense(self.width, dtype=self.dtype, name='out_proj', kernel_init=nn.initializers.normal(proj_std))(out)


class DecoderBlock(nn.Module):
  width: int
  heads: int
  layers: int
  act: str
  dtype: Any = jnp.float32
  mlp_width: int = 0
  ln_eps: float = LN_EPS

  @nn.compact
  def __call__(self, x: jax.Array, image_tokens: jax.Array, mask: jax.Array, token_mask: jax.Array | None = None
               ) -> jax.Array:
    """x: [B, T, L, w] (T sequences per image); image_tokens: [B, N, d]; mask: [B * T, 1, L, L]; token_mask: None or
    [B, N] bool, the image tokens that may be read (a NaFlex image's real patches) -> [B, T, L, w]."""
    batch, tasks, length, width = x.shape
    flat = x.reshape(batch * tasks, length, width)
    flat = flat + MaskedSelfAttention(width, self.heads, self.layers, self.dtype, name='self_attn')(
        layer_norm('ln_1', self.dtype, self.ln_eps)(flat), mask)
    # Each query row reads the image on its own: the T sequences of an image are one query set of T * L rows, so
    # the image's keys and values are computed once, not once per task.
    queries = flat.reshape(batch, tasks * length, width)
    queries = CrossAttention(width, self.heads, dtype=self.dtype, name='cross_attn')(queries, image_tokens, token_mask)
    flat = queries.reshape(batch * tasks, length, width)
    mlp = Mlp(width, self.layers, self.act, self.dtype, self.mlp_width, name='mlp')
    flat = flat + mlp(layer_norm('ln_2', self.dtype, self.ln_eps)(flat))
    return flat.reshape(batch, tasks, length, width)


def attention_mask(parallel: jax.Array, length: int) -> jax.Array:
  """parallel: [S] bool -> [S, 1, L, L] bool: causal (query t sees keys u <= t), or everything where parallel."""
  causal = jnp.tril(jnp.ones((length, length), bool))
  return causal[None, None] | parallel[:, None, None, None]


class LoccaDecoder(nn.Module):
  """The decoder. `vocab_size` is the output vocabulary (locca_tasks.LoccaLayout.output_vocab_size); the input
  vocabulary has one more id, MASK = vocab_size."""
  width: int
  heads: int
  layers: int
  vocab_size: int
  length: int  # the longest sequence, the learned position embedding's rows
  act: str = 'gelu'
  dtype: Any = jnp.float32
  mlp_width: int = 0  # each block's MLP hidden width; 0 = 4 * width
  ln_eps: float = LN_EPS
  logits_init_std: float = 0.0  # 0: a zero-initialised output layer (CapPa)

  @property
  def mask_id(self) -> int:
    return self.vocab_size

  @nn.compact
  def __call__(self, image_tokens: jax.Array, inputs: jax.Array, parallel: jax.Array | None = None,
               token_mask: jax.Array | None = None) -> jax.Array:
    """image_tokens: [B, N, d] (the image tower's un-pooled tokens, any width d); inputs: [B, T, L] int ids
    (T task sequences per image; [B, L] is read as T = 1); parallel: None or [B, T] ([B]) bool, the rows predicted
    in parallel; token_mask: None (every token) or [B, N] bool, the image tokens the cross-attention reads (a
    NaFlex batch's real patches, not its padding) -> logits [B, T, L, vocab_size] ([B, L, vocab_size] for [B, L]
    inputs), in the model's dtype."""
    single = inputs.ndim == 2
    if single:
      inputs = inputs[:, None]
      parallel = None if parallel is None else parallel[:, None]
    batch, tasks, length = inputs.shape
    if length > self.length:
      raise ValueError(f'decoder inputs of length {length} exceed the decoder length {self.length}')
    if parallel is None:
      parallel = jnp.zeros((batch, tasks), bool)
    ids = jnp.where(parallel[..., None], self.mask_id, inputs)
    embedding = nn.Embed(self.vocab_size + 1, self.width, embedding_init=nn.initializers.normal(0.02),
                         dtype=self.dtype, name='token_embedding')
    position = self.param('positional_embedding', nn.initializers.normal(0.01), (self.length, self.width))
    x = embedding(ids) + position[:length].astype(self.dtype)
    mask = attention_mask(parallel.reshape(batch * tasks), length)
    for i in range(self.layers):
      x = DecoderBlock(self.width, self.heads, self.layers, self.act, self.dtype, self.mlp_width, self.ln_eps,
                       name=f'blocks_{i}')(x, image_tokens, mask, token_mask)
    x = layer_norm('ln_final', self.dtype, self.ln_eps)(x)
    init = nn.initializers.normal(self.logits_init_std) if self.logits_init_std else nn.initializers.zeros
    logits = nn.Dense(self.vocab_size, dtype=self.dtype, kernel_init=init, name='logits')(x)
    return logits[:, 0] if single else logits


def decoder_for_text_tower(text: Any, vocab_size: int, length: int, act: str, layers: int = 0,
                           dtype: Any = jnp.float32) -> LoccaDecoder:
  """The decoder SigLIP 2 pairs with a text tower (`config.model.text`): its width, heads, MLP width and LayerNorm
  eps, with `layers` blocks (0: half the tower's, at least 1)."""
  return LoccaDecoder(width=text.width, heads=text.heads, layers=layers or max(1, text.layers // 2),
                      vocab_size=vocab_size, length=length, act=act, dtype=dtype,
                      mlp_width=text.get('mlp_width', 0), ln_eps=text.get('ln_eps', LN_EPS))


def decoder_from_params(text: Any, params: dict, act: str, dtype: Any = jnp.float32) -> LoccaDecoder:
  """The `decoder_for_text_tower` whose parameters `params` are (params[PARAMS_NAME]): its output vocabulary, length
  and depth read from their shapes, the rest from the text tower config `text`."""
  vocab_size = params['logits']['kernel'].shape[-1]
  length = params['positional_embedding'].shape[0]
  layers = sum(1 for name in params if name.startswith('blocks_'))
  return decoder_for_text_tower(text, vocab_size, length, act, layers=layers, dtype=dtype)
