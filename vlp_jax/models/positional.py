"""Positional embeddings at other resolutions (multi-crop local views, eval at 336px, ...)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def resize_positional_embedding(pos: jax.Array, grid: int, new_grid: tuple[int, int], prefix: int = 1
                                ) -> jax.Array:
  """[prefix + g*g, C] -> [prefix + h*w, C], bicubic on the spatial part; the `prefix` leading slots (the class
  token's: 1 for CLIP's ViT, 0 for SigLIP's) are kept."""
  if new_grid == (grid, grid):
    return pos
  spatial = pos[prefix:].reshape(grid, grid, -1)
  spatial = jax.image.resize(spatial, (*new_grid, spatial.shape[-1]), method='bicubic')
  return jnp.concatenate([pos[:prefix], spatial.reshape(-1, pos.shape[-1])], axis=0)
