"""ZeroVL's coin-flipping mixup loss: InfoNCE with two targets per row, the pair itself and its reversed partner.

When one modality of the batch is mixed with the reversed batch (x'_i = lam x_i + (1 - lam) x_{B-1-i}), sample i
holds example i with weight lam and example B-1-i with weight 1 - lam, whichever modality was mixed. So in both
directions the soft target of row i is lam at column i and 1 - lam at column B-1-i (ZeroVL appendix A.3).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from vlp_jax.parallel import constrain_rows


def mixup_infonce(zi: jax.Array, zt: jax.Array, log_scale: jax.Array, lam: jax.Array
                  ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """L = lam CE(logits, arange) + (1 - lam) CE(logits, reversed arange), averaged over both directions.

  zi, zt: [B, d] L2-normalised (one of them computed from mixed inputs); log_scale: [] with s = exp(log_scale);
  lam: [] the mixing weight of the unreversed pair. Means are over the global batch. With lam = 1 this is exactly
  `clip_infonce`.
  The [B, B] logits are row-sharded; text->image reduces over columns of the same matrix, and both targets are
  computed from the pairs directly, so no device ever holds B x B.
  Returns (loss [], metrics with the two directions and the in-batch top-1 accuracy).
  """
  zi, zt = zi.astype(jnp.float32), zt.astype(jnp.float32)
  lam = jnp.asarray(lam, jnp.float32)
  scale = jnp.exp(log_scale.astype(jnp.float32))
  logits = constrain_rows(scale * zi @ zt.T)  # [B, B]
  positives = scale * jnp.sum(zi * zt, axis=-1)  # [B] logits[i, i]
  # logits[i, B-1-i]. Column j's reversed target is logits[B-1-j, j], the same values in reverse order, so both
  # directions share this vector (the mean over the batch does not see the order).
  reversed_positives = scale * jnp.sum(zi * zt[::-1], axis=-1)  # [B]

  def two_target_ce(log_normalizer):
    return (lam * jnp.mean(log_normalizer - positives) +
            (1.0 - lam) * jnp.mean(log_normalizer - reversed_positives))

  loss_i2t = two_target_ce(jax.nn.logsumexp(logits, axis=1))
  loss_t2i = two_target_ce(jax.nn.logsumexp(logits, axis=0))
  metrics = {
      'loss_i2t': loss_i2t,
      'loss_t2i': loss_t2i,
      'i2t_batch_acc': jnp.mean(jnp.argmax(logits, axis=1) == jnp.arange(logits.shape[0])),
      'logit_scale': scale,
  }
  return (loss_i2t + loss_t2i) / 2, metrics
