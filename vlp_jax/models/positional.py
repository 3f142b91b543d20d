"""Positional embeddings at other resolutions (multi-crop local views, eval at 336px, ...)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def resize_positional_embedding(pos: jax.Array, grid: int, new_grid: tuple[int, int]) -> jax.Array:
  """[1 + g*g, C] -> [1 + h*w, C], bicubic on the spatial part; the leading (class / mean-token) slot is kept."""
  if new_grid == (grid, grid):
    return pos
  spatial = pos[1:].reshape(grid, grid, -1)
  spatial = jax.image.resize(spatial, (*new_grid, spatial.shape[-1]), method='bicubic')
  return jnp.concatenate([pos[:1], spatial.reshape(-1, pos.shape[-1])], axis=0)
