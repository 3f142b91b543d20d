"""The tables a model config picks from: image towers (`config.model.vision.type`) and compute dtypes
(`config.model.dtype`). A tower module registers a builder

  @VISION_TOWERS.register('vit')
  def build(vision, embed_dim, act, dtype, stack) -> nn.Module: ...

whose module maps [B, H, W, 3] images to {'embed': [B, d], 'cls': [B, w], 'tokens': [B, N, w]} (see vit.py); `stack`
(transformer.BlockStack) says how transformer blocks are rematerialised and scanned. Its options live under
`config.model.vision`. The module is called as `module(images, train=..., with_tokens=..., rng=...)`: `rng` is
None, or when training one key per image ([B] typed keys, from the objective's per-example keys; objectives/base.py).
A stochastic option (the ViT's patch dropout, drop path, ...) is active only when `train`, and draws image i's
randomness from rng[i] alone, e.g.

  keep = jax.vmap(lambda key: jax.random.bernoulli(key, 1 - p, (num_patches,)))(fold_in_rows(rng, SITE))

with a constant SITE per random site of the tower. Drawn that way, an image's randomness does not depend on which
other images share the call, so the tower stays per example and decoupled accumulation stays exact. (Not flax's
`make_rng`: one key for the whole call would draw differently for each micro-batching.) Deterministic towers ignore
`rng`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from vlp_jax.registry import Registry

VISION_TOWERS = Registry('image tower', 'model.vision.type', package='vlp_jax.models')

# The towers made of patch tokens and transformer blocks: they have patch embeddings, patch dropout, layer groups.
PATCH_TOWERS = ('vit', 'siglip_vit')

DTYPES = Registry('compute dtype', 'model.dtype')
DTYPES.add('float32', jnp.float32)
DTYPES.add('bfloat16', jnp.bfloat16)
DTYPES.add('float16', jnp.float16)


def fold_in_rows(keys: jax.Array, data: int | jax.Array) -> jax.Array:
  """[B] keys -> [B] keys: fold_in(keys[i], data) (`data` an int, or [B] ints: one per row)."""
  return jax.vmap(jax.random.fold_in)(keys, jnp.broadcast_to(jnp.asarray(data, jnp.uint32), keys.shape))
