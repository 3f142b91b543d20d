"""Projection heads that objectives add on top of the towers."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

# PyTorch's BatchNorm1d defaults (SLIP's SyncBatchNorm): running = 0.9 running + 0.1 batch, eps 1e-5.
BN_MOMENTUM = 0.9
BN_EPS = 1e-5


class SimCLRHead(nn.Module):
  """SLIP's SimCLR projector: Linear(w, mlp_dim), BN, ReLU, Linear(mlp_dim, mlp_dim), BN, ReLU,
  Linear(mlp_dim, out_dim). Layer names follow SLIP's `image_mlp` (layer1, bn1, layer2, bn2, layer3).

  The two hidden Linears have no bias: the BatchNorm after each subtracts the batch mean, so a bias there has an
  exactly zero gradient and no effect (Adam would only turn its rounding-noise gradient into random steps).
  Paper sizes: mlp_dim 4096, out_dim 256. BatchNorm uses batch statistics when training: under a jit over the
  global batch these are the statistics of the global batch (SLIP's SyncBatchNorm), and with
  `mutable=['batch_stats']` the running averages are updated.
  """
  mlp_dim: int = 4096
  out_dim: int = 256
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    """x: [B, w] -> [B, out_dim] (not normalised)."""
    for i in (1, 2):
      x = nn.Dense(self.mlp_dim, use_bias=False, dtype=self.dtype, name=f'layer{i}')(x)
      x = nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS, dtype=self.dtype,
                       name=f'bn{i}')(x)
      x = nn.relu(x)
    return nn.Dense(self.out_dim, dtype=self.dtype, name='layer3')(x)
