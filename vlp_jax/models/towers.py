"""The tables a model config picks from: image towers (`config.model.vision.type`) and compute dtypes
(`config.model.dtype`). A tower module registers a builder

  @VISION_TOWERS.register('vit')
  def build(vision, embed_dim, act, dtype, remat) -> nn.Module: ...

whose module maps [B, H, W, 3] images to {'embed': [B, d], 'cls': [B, w], 'tokens': [B, N, w]} (see vit.py); its
options live under `config.model.vision`.
"""
from __future__ import annotations

import jax.numpy as jnp

from vlp_jax.registry import Registry

VISION_TOWERS = Registry('image tower', 'model.vision.type', package='vlp_jax.models')

DTYPES = Registry('compute dtype', 'model.dtype')
DTYPES.add('float32', jnp.float32)
DTYPES.add('bfloat16', jnp.bfloat16)
DTYPES.add('float16', jnp.float16)
