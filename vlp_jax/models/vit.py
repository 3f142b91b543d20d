"""The ViT image tower, OpenAI's layout: patch conv, class token, pre-LN transformer, projection of the class token.
Its one stochastic option is FLIP's patch dropout (`config.model.vision.patch_dropout`, as open_clip's)."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from vlp_jax.models.naflex_inputs import PatchEmbedding, check_patch_embedding, patchify
from vlp_jax.models.positional import resize_positional_embedding
from vlp_jax.models.towers import VISION_TOWERS, VisionTower, check_heads, check_patch_dropout, fold_in_rows
from vlp_jax.models.transformer import LN_EPS, BlockStack, Transformer, layer_norm

# The tower's random sites, folded into each image's key (towers.py): one constant per site, so that a site added
# later draws independently of the existing ones.
PATCH_DROPOUT_SITE = 0


def kept_patch_count(num_patches: int, rate: float) -> int:
  """K = max(1, int(N (1 - rate))), the patches an image keeps out of N under patch dropout (open_clip's rule)."""
  return max(1, int(num_patches * (1 - rate)))


def kept_patch_indices(rng: jax.Array, num_patches: int, rate: float) -> jax.Array:
  """rng: [B] keys -> [B, K] int32, each image's kept patches (0-based among its N patches, ascending): a uniformly
  random K-subset drawn from that image's key alone, so it does not depend on the other images of the call."""
  keep = kept_patch_count(num_patches, rate)
  # Ascending: the kept tokens stay in image order, and the result is a set (independent of the draw order).
  draw = lambda key: jnp.sort(jax.random.permutation(key, num_patches)[:keep])  # noqa: E731
  return jax.vmap(draw)(fold_in_rows(rng, PATCH_DROPOUT_SITE))


def drop_patches(x: jax.Array, indices: jax.Array) -> jax.Array:
  """x: [B, 1 + N, w] (the class token first), indices: [B, K] -> [B, 1 + K, w]: the class token, always kept, then
  the patches at `indices`, in that order."""
  patches = jnp.take_along_axis(x[:, 1:], indices[:, :, None], axis=1)
  return jnp.concatenate([x[:, :1], patches], axis=1)


class VisionTransformer(nn.Module):
  image_size: int
  patch_size: int
  width: int
  layers: int
  heads: int
  output_dim: int
  act: str
  dtype: Any = jnp.float32
  stack: BlockStack = BlockStack()
  patch_dropout: float = 0.0  # fraction of patch tokens dropped per image in training (FLIP); 0 = none
  mlp_width: int = 0  # each block's MLP hidden width; 0 = 4 * width
  ln_eps: float = LN_EPS
  patch_embedding: str = 'conv'  # naflex.PATCH_EMBEDDINGS: a strided conv, or one matmul over flattened patches

  @nn.compact
  def __call__(self, images: jax.Array, train: bool = False, with_tokens: bool = True,
               rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """images: [B, H, W, 3] normalised float -> {'embed': [B, d], 'cls': [B, w], 'tokens': [B, N, w]}.

    `cls` and `tokens` are after `ln_post` and before `proj`. Images whose size differs from `image_size` (e.g.
    multi-crop local views) get bicubically interpolated positional embeddings. `with_tokens=False` leaves out
    `tokens`, and the last block computes the [cls] row only (`Transformer`'s `pool_index`). `rng`: [B] keys when
    training, for stochastic options (towers.py).

    Patch dropout (`patch_dropout` = p > 0, only when `train` and `rng` is given): after the positional embeddings,
    before `ln_pre`, each image keeps its class token and K = max(1, int(N (1 - p))) of its N patch tokens, a
    uniformly random subset drawn from rng[i] alone, in their original order (N from the actual grid, so resized
    crops work too). The transformer then sees 1 + K tokens and `tokens` is [B, K, w]: the kept patches' states,
    ascending by patch index. Without `train` (evaluation, export) or without keys, nothing is dropped.
    """
    scale = self.width**-0.5
    batch, grid_h, grid_w = images.shape[0], images.shape[1] // self.patch_size, images.shape[2] // self.patch_size
    if self.patch_embedding == 'matmul':
      x = PatchEmbedding(self.width, self.patch_size, use_bias=False, dtype=self.dtype, name='conv1')(
          patchify(images, self.patch_size))
    else:
      x = nn.Conv(self.width, (self.patch_size,) * 2, strides=(self.patch_size,) * 2, padding='VALID',
                  use_bias=False, dtype=self.dtype, name='conv1')(images.astype(self.dtype))
      x = x.reshape(batch, grid_h * grid_w, self.width)
    class_embedding = self.param('class_embedding', nn.initializers.normal(scale), (self.width,))
    grid = self.image_size // self.patch_size
    pos = self.param('positional_embedding', nn.initializers.normal(scale), (grid * grid + 1, self.width))
    pos = resize_positional_embedding(pos, grid, (grid_h, grid_w))
    cls = jnp.broadcast_to(class_embedding.astype(x.dtype), (batch, 1, self.width))
    x = jnp.concatenate([cls, x], axis=1) + pos.astype(x.dtype)
    if self.patch_dropout and train and rng is not None:  # p = 0 touches no key: the deterministic graph as before
      if rng.shape != (batch,):
        raise ValueError(f'patch dropout needs one key per image, rng of shape ({batch},), got {rng.shape}')
      x = drop_patches(x, kept_patch_indices(rng, grid_h * grid_w, self.patch_dropout))
    x = layer_norm('ln_pre', self.dtype, self.ln_eps)(x)
    pool_index = None if with_tokens else jnp.zeros((batch,), jnp.int32)
    x = Transformer(self.width, self.layers, self.heads, self.act, self.dtype, self.stack, self.mlp_width,
                    self.ln_eps, name='transformer')(x, pool_index=pool_index)
    x = layer_norm('ln_post', self.dtype, self.ln_eps)(x)
    proj = self.param('proj', nn.initializers.normal(scale), (self.width, self.output_dim))
    out = {'embed': x[:, 0] @ proj.astype(x.dtype), 'cls': x[:, 0]}
    return {**out, 'tokens': x[:, 1:]} if with_tokens else out


@VISION_TOWERS.register('vit')
class ViTTower(VisionTower):
  """OpenAI's ViT. Options: image_size, patch_size, width, layers, heads, mlp_width (0 = 4 * width), ln_eps,
  patch_dropout, the fraction of patch tokens each image drops in training (FLIP), in [0, 1), and patch_embedding
  (naflex.PATCH_EMBEDDINGS: 'conv' or 'matmul', the same parameters and values up to rounding)."""
  patch_based = True
  layer_groups = True
  position_prefix = 1  # the class token's row

  @classmethod
  def options(cls, image_size: int, patch_size: int, width: int, layers: int, heads: int, mlp_width: int = 0,
              ln_eps: float = LN_EPS) -> dict:
    """A preset's config.model.vision for this tower."""
    return dict(cls.default_config(), image_size=image_size, patch_size=patch_size, width=width, layers=layers,
                heads=heads, mlp_width=mlp_width, ln_eps=ln_eps)

  @classmethod
  def validate(cls, vision: ml_collections.ConfigDict, model: ml_collections.ConfigDict) -> None:
    check_patch_dropout(vision.patch_dropout)
    check_heads('vision', vision.width, vision.heads)
    check_patch_embedding(vision.patch_embedding)
    if vision.image_size % vision.patch_size:
      raise ValueError(f'config.model.vision.image_size={vision.image_size} is not a multiple of '
                       f'config.model.vision.patch_size={vision.patch_size}')

  @classmethod
  def build(cls, vision: ml_collections.FrozenConfigDict, embed_dim: int, act: str, dtype: Any, stack: BlockStack
            ) -> VisionTransformer:
    # .get: model configs written before the option (presets registered by hand, say) have no key.
    return VisionTransformer(vision.image_size, vision.patch_size, vision.width, vision.layers, vision.heads,
                             embed_dim, act, dtype, stack, patch_dropout=vision.get('patch_dropout', 0.0),
                             mlp_width=vision.get('mlp_width', 0), ln_eps=vision.get('ln_eps', LN_EPS),
                             patch_embedding=vision.get('patch_embedding', 'conv'))
