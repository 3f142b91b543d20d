"""The ViT image tower, OpenAI's layout: patch conv, class token, pre-LN transformer, projection of the class token."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from vlp_jax.models.positional import resize_positional_embedding
from vlp_jax.models.towers import VISION_TOWERS
from vlp_jax.models.transformer import Transformer, layer_norm


class VisionTransformer(nn.Module):
  image_size: int
  patch_size: int
  width: int
  layers: int
  heads: int
  output_dim: int
  act: str
  dtype: Any = jnp.float32
  remat: bool = False

  @nn.compact
  def __call__(self, images: jax.Array, train: bool = False, with_tokens: bool = True,
               rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """images: [B, H, W, 3] normalised float -> {'embed': [B, d], 'cls': [B, w], 'tokens': [B, N, w]}.

    `cls` and `tokens` are after `ln_post` and before `proj`. Images whose size differs from `image_size` (e.g.
    multi-crop local views) get bicubically interpolated positional embeddings. `with_tokens=False` leaves out
    `tokens`, and the last block computes the [cls] row only (`Transformer`'s `pool_index`). `rng`: [B] keys when
    training, for stochastic options (towers.py); this tower has none yet.
    """
    del train, rng  # deterministic: no dropout, drop path or patch dropout
    scale = self.width**-0.5
    x = nn.Conv(self.width, (self.patch_size,) * 2, strides=(self.patch_size,) * 2, padding='VALID',
                use_bias=False, dtype=self.dtype, name='conv1')(images.astype(self.dtype))
    batch, grid_h, grid_w, _ = x.shape
    x = x.reshape(batch, grid_h * grid_w, self.width)
    class_embedding = self.param('class_embedding', nn.initializers.normal(scale), (self.width,))
    grid = self.image_size // self.patch_size
    pos = self.param('positional_embedding', nn.initializers.normal(scale), (grid * grid + 1, self.width))
    pos = resize_positional_embedding(pos, grid, (grid_h, grid_w))
    cls = jnp.broadcast_to(class_embedding.astype(x.dtype), (batch, 1, self.width))
    x = jnp.concatenate([cls, x], axis=1) + pos.astype(x.dtype)
    x = layer_norm('ln_pre', self.dtype)(x)
    pool_index = None if with_tokens else jnp.zeros((batch,), jnp.int32)
    x = Transformer(self.width, self.layers, self.heads, self.act, self.dtype, self.remat, name='transformer')(
        x, pool_index=pool_index)
    x = layer_norm('ln_post', self.dtype)(x)
    proj = self.param('proj', nn.initializers.normal(scale), (self.width, self.output_dim))
    out = {'embed': x[:, 0] @ proj.astype(x.dtype), 'cls': x[:, 0]}
    return {**out, 'tokens': x[:, 1:]} if with_tokens else out


@VISION_TOWERS.register('vit')
def build(vision: ml_collections.FrozenConfigDict, embed_dim: int, act: str, dtype: Any, remat: bool
          ) -> VisionTransformer:
  return VisionTransformer(vision.image_size, vision.patch_size, vision.width, vision.layers, vision.heads,
                           embed_dim, act, dtype, remat)
