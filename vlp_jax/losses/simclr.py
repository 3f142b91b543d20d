"""SimCLR's NT-Xent loss as SLIP writes it (SLIP supplementary, Algorithm 1), over the global batch.

  L_a = CE([qa qb^T, qa qa^T - 1e9 I] / tau, arange),  L_b = CE([qb qa^T, qb qb^T - 1e9 I] / tau, arange),
  L = (L_a + L_b) / 2.
Each [B, 2B] logit matrix is row-sharded over the mesh and the self-similarity mask comes from iota, so no device
ever holds a B x B (or B x 2B) matrix.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from vlp_jax.parallel import constrain_rows

MASK = 1e9  # subtracted from the self-similarities before the temperature, as in the pseudocode


def _mask_self(similarity: jax.Array) -> jax.Array:
  """[B, B] -> the same with MASK subtracted on the diagonal; the mask is built from iota shard by shard."""
  rows = jax.lax.broadcasted_iota(jnp.int32, similarity.shape, 0)
  cols = jax.lax.broadcasted_iota(jnp.int32, similarity.shape, 1)
  return similarity - jnp.where(rows == cols, MASK, 0.0)


def _logits(q: jax.Array, k: jax.Array, tau: float) -> jax.Array:
  """q, k: [B, d] -> [B, 2B] logits [q k^T, q q^T - MASK I] / tau, row-sharded. Column j < B is the pair (i, j)
  across views, so the positive of row i sits in column i."""
  return constrain_rows(jnp.concatenate([q @ k.T, _mask_self(q @ q.T)], axis=1) / tau)


def simclr_loss(qa: jax.Array, qb: jax.Array, tau: float = 0.1) -> tuple[jax.Array, dict[str, jax.Array]]:
  """qa, qb: [B, d] L2-normalised embeddings of two views of the same B images -> (loss [], metrics).

  Metrics: the two directions ('ssl_loss_a', 'ssl_loss_b') and 'ssl_acc', the fraction of rows of the a->[b, a]
  logits whose argmax is the positive (SLIP's ssl_acc, as a fraction).
  """
  qa, qb = qa.astype(jnp.float32), qb.astype(jnp.float32)
  logits_a, logits_b = _logits(qa, qb, tau), _logits(qb, qa, tau)  # [B, 2B] each
  positives = jnp.sum(qa * qb, axis=-1) / tau  # [B], the diagonal of qa qb^T
  loss_a = jnp.mean(jax.nn.logsumexp(logits_a, axis=1) - positives)
  loss_b = jnp.mean(jax.nn.logsumexp(logits_b, axis=1) - positives)
  labels = jnp.arange(qa.shape[0])
  metrics = {
      'ssl_loss_a': loss_a,
      'ssl_loss_b': loss_b,
      'ssl_acc': jax.lax.stop_gradient(jnp.mean(jnp.argmax(logits_a, axis=1) == labels)),
  }
  return (loss_a + loss_b) / 2, metrics
