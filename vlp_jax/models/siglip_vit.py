"""SigLIP's image tower (`config.model.vision.type='siglip_vit'`), laid out as the SigLIP checkpoints are: a patch
conv with a bias, learned positional embeddings for the patches only (no class token, no LayerNorm before the
blocks), pre-LN blocks, `ln_post`, then multi-head attention pooling ("MAP": one learned probe attends to every
patch, followed by a LayerNorm and an MLP with a residual). No projection: the pooled feature is the embedding, so
`config.model.embed_dim` equals the tower's width.

Parameter tree under `visual/`: conv1/{kernel, bias}, positional_embedding [N, w], transformer/resblocks_i, ln_post,
attn_pool/{probe [1, 1, w], attn/{in_proj, out_proj}, ln, mlp/{c_fc, c_proj}}.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from vlp_jax.errors import ConfigError
from vlp_jax.models.naflex_inputs import (NaflexImages, PatchEmbedding, check_patch_embedding, patchify,
                                          resized_position_embedding, sequence_lengths)
from vlp_jax.models.positional import resize_positional_embedding
from vlp_jax.models.towers import VISION_TOWERS, VisionTower, check_heads, check_patch_dropout
from vlp_jax.models.transformer import BlockStack, Mlp, Transformer, layer_norm
from vlp_jax.models.vit import kept_patch_indices


class ProbeAttention(nn.Module):
  """Attention of one query per image (the probe) over the image's tokens, with a packed `in_proj` ([w, 3w] + bias:
  q, k, v in that order, torch's nn.MultiheadAttention layout) and `out_proj`."""
  width: int
  heads: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, probe: jax.Array, x: jax.Array, lengths: jax.Array | None = None) -> jax.Array:
    """probe: [B, 1, w], x: [B, N, w] -> [B, 1, w]; `lengths` [B]: each image's real tokens (NaFlex), the probe
    reads none past them."""
    batch, length, _ = x.shape
    head_dim = self.width // self.heads
    in_proj = nn.Dense(3 * self.width, dtype=self.dtype, name='in_proj',
                       kernel_init=nn.initializers.normal(self.width**-0.5))
    # One projection of [probe; tokens]: q is read from the probe's row, k and v from the tokens' rows.
    qkv = in_proj(jnp.concatenate([probe, x], axis=1))
    q = qkv[:, :1, :self.width].reshape(batch, 1, self.heads, head_dim)
    k = qkv[:, 1:, self.width:2 * self.width].reshape(batch, length, self.heads, head_dim)
    v = qkv[:, 1:, 2 * self.width:].reshape(batch, length, self.heads, head_dim)
    if lengths is None:
      out = jax.nn.dot_product_attention(q, k, v)
    else:
      out = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    out = out.reshape(batch, 1, self.width)
    return nn.Dense(self.width, dtype=self.dtype, name='out_proj',
                    kernel_init=nn.initializers.normal(self.width**-0.5))(out)


class AttentionPool(nn.Module):
  """MAP pooling: h = attn(probe, x); h + mlp(ln(h)), as SigLIP's head."""
  width: int
  heads: int
  act: str
  dtype: Any = jnp.float32
  mlp_width: int = 0
  ln_eps: float = 1e-6

  @nn.compact
  def __call__(self, x: jax.Array, lengths: jax.Array | None = None) -> jax.Array:
    """x: [B, N, w] -> [B, w]; `lengths` [B]: each image's real tokens (NaFlex), the others not pooled."""
    probe = self.param('probe', nn.initializers.xavier_uniform(), (1, 1, self.width))
    probe = jnp.broadcast_to(probe.astype(x.dtype), (x.shape[0], 1, self.width))
    h = ProbeAttention(self.width, self.heads, self.dtype, name='attn')(probe, x, lengths)
    mlp = Mlp(self.width, 1, self.act, self.dtype, self.mlp_width, name='mlp')
    h = h + mlp(layer_norm('ln', self.dtype, self.ln_eps)(h))
    return h[:, 0]


class SiglipVisionTransformer(nn.Module):
  image_size: int
  patch_size: int
  width: int
  layers: int
  heads: int
  act: str
  dtype: Any = jnp.float32
  stack: BlockStack = BlockStack()
  mlp_width: int = 0
  ln_eps: float = 1e-6
  patch_dropout: float = 0.0
  patch_embedding: str = 'conv'  # naflex.PATCH_EMBEDDINGS, for [B, H, W, 3] images (NaflexImages: always a matmul)

  @nn.compact
  def __call__(self, images: jax.Array | NaflexImages, train: bool = False, with_tokens: bool = True,
               rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """images: [B, H, W, 3] or NaflexImages (N patch slots) -> {'embed': [B, w], 'cls': [B, w], 'tokens': [B, N, w]}.

    `embed` and `cls` are both the pooled feature (there is no class token and no projection); `tokens` are the
    patch states after `ln_post`, in the joint space already. Every patch feeds the pooling, so `with_tokens=False`
    saves nothing here. Patch dropout (`train` with `rng`): each image keeps K = max(1, int(N (1 - p))) of its N
    patches, drawn from rng[i] alone (vit.kept_patch_indices), and `tokens` are the kept ones.

    NaflexImages (models/naflex_inputs.py): the same parameters; the patches embedded by a matmul with conv1's kernel,
    the [g, g] position embedding resized to each image's (rows, cols) as torch's antialiased bilinear interpolation
    does, and the padding slots masked in every attention and in the pooling. `tokens` then has N rows per image,
    the rows past rows * cols padding.
    """
    del with_tokens
    naflex = isinstance(images, NaflexImages)
    grid = self.image_size // self.patch_size
    if naflex or self.patch_embedding == 'matmul':
      patches = images.patches if naflex else patchify(images, self.patch_size)
      x = PatchEmbedding(self.width, self.patch_size, use_bias=True, dtype=self.dtype, name='conv1')(patches)
    else:
      x = nn.Conv(self.width, (self.patch_size,) * 2, strides=(self.patch_size,) * 2, padding='VALID',
                  use_bias=True, dtype=self.dtype, name='conv1')(images.astype(self.dtype))
      x = x.reshape(x.shape[0], -1, self.width)
    batch = x.shape[0]
    pos = self.param('positional_embedding', nn.initializers.normal(self.width**-0.5), (grid * grid, self.width))
    lengths = None
    if naflex:
      lengths = sequence_lengths(images.spatial_shapes)
      x = x + resized_position_embedding(pos.reshape(grid, grid, self.width), images.spatial_shapes,
                                         x.shape[1]).astype(x.dtype)
      if self.patch_dropout and train and rng is not None:
        raise ConfigError(f'config.model.vision.patch_dropout={self.patch_dropout} does not apply to NaFlex images '
                          '(their padding would be drawn as patches); set it to 0 to train on NaFlex batches')
    else:
      grid_h, grid_w = images.shape[1] // self.patch_size, images.shape[2] // self.patch_size
      x = x + resize_positional_embedding(pos, grid, (grid_h, grid_w), prefix=0).astype(x.dtype)
    if self.patch_dropout and train and rng is not None:
      if rng.shape != (batch,):
        raise ValueError(f'patch dropout needs one key per image, rng of shape ({batch},), got {rng.shape}')
      indices = kept_patch_indices(rng, x.shape[1], self.patch_dropout)
      x = jnp.take_along_axis(x, indices[:, :, None], axis=1)
    x = Transformer(self.width, self.layers, self.heads, self.act, self.dtype, self.stack, self.mlp_width,
                    self.ln_eps, name='transformer')(x, lengths=lengths)
    x = layer_norm('ln_post', self.dtype, self.ln_eps)(x)
    pooled = AttentionPool(self.width, self.heads, self.act, self.dtype, self.mlp_width, self.ln_eps,
                           name='attn_pool')(x, lengths)
    return {'embed': pooled, 'cls': pooled, 'tokens': x}


@VISION_TOWERS.register('siglip_vit')
class SiglipViTTower(VisionTower):
  """SigLIP's ViT: no class token, attention pooling, no projection (config.model.embed_dim equals the width).
  The ViT's options; an image size need not be a multiple of the patch size (the conv drops the remainder, as the
  So400m/14 checkpoints at 384 px).

  NaFlex (SigLIP 2's aspect-preserving, variable-length images): the tower takes NaflexImages with the same
  parameters whatever these options say. `naflex` (bool) says the model's own preprocessing is NaFlex (what
  `vlp_jax.load(...).encode_image` feeds it), `max_patches` the patch budget that preprocessing
  uses when none is given. `patch_embedding` (naflex.PATCH_EMBEDDINGS): how fixed-size images are embedded."""
  patch_based = True
  layer_groups = True
  position_prefix = 0  # no class token

  @classmethod
  def default_config(cls) -> dict:
    return dict(super().default_config(), naflex=False, max_patches=256)

  @classmethod
  def options(cls, image_size: int, patch_size: int, width: int, layers: int, heads: int, mlp_width: int = 0
              ) -> dict:
    """A preset's config.model.vision for this tower (LayerNorm eps 1e-6, as SigLIP's)."""
    return dict(cls.default_config(), image_size=image_size, patch_size=patch_size, width=width, layers=layers,
                heads=heads, mlp_width=mlp_width, ln_eps=1e-6)

  @classmethod
  def validate(cls, vision: ml_collections.ConfigDict, model: ml_collections.ConfigDict) -> None:
    check_patch_dropout(vision.patch_dropout)
    check_heads('vision', vision.width, vision.heads)
    check_patch_embedding(vision.patch_embedding)
    check_naflex(vision, model)
    if model.embed_dim != vision.width:
      raise ValueError(f"config.model.embed_dim={model.embed_dim} must equal config.model.vision.width="
                       f"{vision.width}: a config.model.vision.type='siglip_vit' tower has no projection")

  @classmethod
  def build(cls, vision: ml_collections.FrozenConfigDict, embed_dim: int, act: str, dtype: Any, stack: BlockStack
            ) -> SiglipVisionTransformer:
    if embed_dim != vision.width:
      raise ValueError(f'a siglip_vit tower has no projection: config.model.embed_dim={embed_dim} must equal '
                       f'config.model.vision.width={vision.width}')
    return SiglipVisionTransformer(vision.image_size, vision.patch_size, vision.width, vision.layers, vision.heads,
                                   act, dtype, stack, mlp_width=vision.get('mlp_width', 0),
                                   ln_eps=vision.get('ln_eps', 1e-6), patch_dropout=vision.get('patch_dropout', 0.0),
                                   patch_embedding=vision.get('patch_embedding', 'conv'))


def check_naflex(vision: ml_collections.ConfigDict, model: ml_collections.ConfigDict) -> None:
  """ValueError naming the key when config.model.vision.naflex / max_patches are invalid, or when NaFlex meets an
  option it cannot run with (patch dropout, the 'pallas' attention route)."""
  if not isinstance(vision.naflex, bool):
    raise ValueError(f'config.model.vision.naflex={vision.naflex!r} must be True or False')
  if not isinstance(vision.max_patches, int) or isinstance(vision.max_patches, bool) or vision.max_patches < 1:
    raise ValueError(f'config.model.vision.max_patches={vision.max_patches!r} must be a positive integer (the '
                     'NaFlex patch budget per image)')
  if vision.naflex and vision.patch_dropout:
    raise ValueError(f'config.model.vision.patch_dropout={vision.patch_dropout} does not apply with '
                     'config.model.vision.naflex=True; set it to 0')
  if vision.naflex and model.get('attention', 'auto') == 'pallas':
    raise ValueError("config.model.attention='pallas' does not take NaFlex images' lengths "
                     "(config.model.vision.naflex=True); valid choices with NaFlex: ['auto', 'xla', 'padded', "
                     "'cudnn']")
