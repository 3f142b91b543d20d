"""NaFlex inputs (SigLIP 2's aspect-preserving, variable-length images) and the pieces a patch tower needs for them:
the patch embedding as one matmul over flattened patches, each image's true length, and the learned position
embedding resized to each image's own grid.

A NaFlex batch is already cut into patches on the host (vlp_jax/data/image/naflex_patches.py): image i's rows*cols
patches come first, row by row, each flattened as [patch row, patch column, channel] (transformers'
Siglip2ImageProcessor order, which is also the order of a conv kernel [P, P, 3, w] read as a [P*P*3, w] matrix), then
zero rows up to N.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

# How a patch tower embeds its patches (`config.model.vision.patch_embedding`): 'conv', a strided convolution over
# the image; 'matmul', the image cut into flattened patches and one matmul with the same kernel (the same values up
# to rounding; the NaFlex path always takes it).
PATCH_EMBEDDINGS = ('conv', 'matmul')


class NaflexImages(NamedTuple):
  """A batch of NaFlex images, a pytree (it shards and jits as an array batch does).

  patches: [B, N, P*P*3] float, normalised pixels; image i's rows*cols patches first, zero rows after.
  spatial_shapes: [B, 2] int32, image i's (rows, cols) in patches, rows * cols <= N.
  """
  patches: Any
  spatial_shapes: Any


def check_patch_embedding(value: Any) -> None:
  """ValueError naming config.model.vision.patch_embedding unless it is one of PATCH_EMBEDDINGS."""
  if value not in PATCH_EMBEDDINGS:
    raise ValueError(f'config.model.vision.patch_embedding={value!r} is not valid; valid choices: '
                     f'{list(PATCH_EMBEDDINGS)}')


def patchify(images: jax.Array, patch_size: int) -> jax.Array:
  """[B, H, W, C] -> [B, (H//P) * (W//P), P*P*C]: the whole patches row by row, each flattened as (patch row,
  patch column, channel); a remainder at the bottom or right is dropped (as a 'VALID' strided conv does)."""
  batch, height, width, channels = images.shape
  rows, cols = height // patch_size, width // patch_size
  images = images[:, :rows * patch_size, :cols * patch_size]
  patches = images.reshape(batch, rows, patch_size, cols, patch_size, channels).transpose(0, 1, 3, 2, 4, 5)
  return patches.reshape(batch, rows * cols, patch_size * patch_size * channels)


class PatchEmbedding(nn.Module):
  """A patch embedding holding a conv's parameters (kernel [P, P, C, w], bias [w] with `use_bias`; nn.Conv's names
  and initialisers, so the parameters and their initial values are those of `nn.Conv(w, (P, P), strides=P)`),
  applied as one matmul over flattened patches."""
  width: int
  patch_size: int
  channels: int = 3
  use_bias: bool = True
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, patches: jax.Array) -> jax.Array:
    """patches: [B, N, P*P*C] (the `patchify` order) -> [B, N, w]."""
    kernel = self.param('kernel', nn.linear.default_kernel_init,
                        (self.patch_size, self.patch_size, self.channels, self.width))
    x = patches.astype(self.dtype) @ kernel.reshape(-1, self.width).astype(self.dtype)
    if self.use_bias:
      x = x + self.param('bias', nn.initializers.zeros_init(), (self.width,)).astype(self.dtype)
    return x


def sequence_lengths(spatial_shapes: jax.Array) -> jax.Array:
  """[B, 2] (rows, cols) -> [B] int32: each image's number of real patches, rows * cols."""
  return (spatial_shapes[:, 0] * spatial_shapes[:, 1]).astype(jnp.int32)


def antialiased_bilinear_weights(positions: jax.Array, out_size: jax.Array, in_size: int) -> jax.Array:
  """The weights with which output pixel `positions` [...] of an axis resized from `in_size` to `out_size` [...]
  (per element: sizes may differ from one image to the next) reads the `in_size` input pixels -> [..., in_size].

  torch's F.interpolate(mode='bilinear', align_corners=False, antialias=True) along one axis: a triangle (tent)
  filter centred at the output pixel's centre mapped into the input, widened by the scale when shrinking (the
  antialiasing; plain bilinear when enlarging), normalised to sum to 1 over the input pixels it covers.
  """
  scale = in_size / out_size.astype(jnp.float32)
  support = jnp.maximum(scale, 1.0)
  centre = (positions.astype(jnp.float32) + 0.5) * scale - 0.5
  distance = jnp.abs(jnp.arange(in_size, dtype=jnp.float32) - centre[..., None])
  tent = jnp.maximum(1.0 - distance / support[..., None], 0.0)
  return tent / jnp.sum(tent, axis=-1, keepdims=True)


def resized_position_embedding(grid_embedding: jax.Array, spatial_shapes: jax.Array, length: int) -> jax.Array:
  """The position embedding of every patch slot of a NaFlex batch: grid_embedding [g, g, w] (the learned grid),
  spatial_shapes [B, 2] -> [B, length, w] float32, slot p of image i the embedding resized to image i's (rows, cols)
  at (p // cols, p % cols) for p < rows * cols (slots past it: a finite row, masked downstream).

  Per-slot separable weights, not jax.image.scale_and_translate: the sizes are data under jit, and the weights for
  one slot are two [g] vectors whatever the size, so every batch compiles once; their outer product [g*g] times the
  grid [g*g, w] costs g*g*w per patch, a third of the patch embedding's P*P*3*w at P=16, g=16.
  """
  grid = grid_embedding.shape[0]
  rows, cols = spatial_shapes[:, 0:1], spatial_shapes[:, 1:2]  # [B, 1]
  slots = jnp.arange(length)[None, :]
  real = slots < rows * cols
  slot_row = jnp.where(real, slots // cols, 0)
  slot_col = jnp.where(real, slots % cols, 0)
  row_weights = antialiased_bilinear_weights(slot_row, jnp.broadcast_to(rows, slot_row.shape), grid)  # [B, N, g]
  col_weights = antialiased_bilinear_weights(slot_col, jnp.broadcast_to(cols, slot_col.shape), grid)
  weights = (row_weights[..., :, None] * col_weights[..., None, :]).reshape(*row_weights.shape[:2], grid * grid)
  return weights @ grid_embedding.reshape(grid * grid, -1).astype(jnp.float32)
