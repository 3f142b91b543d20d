"""Contrastive losses over the global batch, as pure functions of normalised embeddings."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from vlp_jax.parallel import constrain_rows


def l2_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
  """[..., d] -> [..., d] with unit L2 norm along the last axis (computed in float32)."""
  x = x.astype(jnp.float32)
  return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), eps))


def clip_infonce(zi: jax.Array, zt: jax.Array, log_scale: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Symmetric InfoNCE: (CE(s zi zt^T, arange) + CE(s zt zi^T, arange)) / 2, means over the global batch.

  zi, zt: [B, d] L2-normalised; log_scale: [] with s = exp(log_scale).
  The [B, B] logits are row-sharded; the text->image direction reduces over columns of the same matrix instead of
  transposing it, so no device ever holds B x B.
  Returns (loss [], metrics with the two directions and the in-batch top-1 accuracy).
  """
  scale = jnp.exp(log_scale.astype(jnp.float32))
  logits = constrain_rows(scale * zi.astype(jnp.float32) @ zt.astype(jnp.float32).T)  # [B, B]
  positives = scale * jnp.sum(zi.astype(jnp.float32) * zt.astype(jnp.float32), axis=-1)  # [B]
  loss_i2t = jnp.mean(jax.nn.logsumexp(logits, axis=1) - positives)
  loss_t2i = jnp.mean(jax.nn.logsumexp(logits, axis=0) - positives)
  labels = jnp.arange(logits.shape[0])
  metrics = {
      'loss_i2t': loss_i2t,
      'loss_t2i': loss_t2i,
      'i2t_batch_acc': jnp.mean(jnp.argmax(logits, axis=1) == labels),
      'logit_scale': scale,
  }
  return (loss_i2t + loss_t2i) / 2, metrics


def mean_offdiagonal_cosine(z: jax.Array) -> jax.Array:
  """z: [B, d] L2-normalised -> [] the mean cosine similarity over the B (B - 1) ordered pairs of different rows.

  From the sum of the rows, |sum z|^2 = sum_ij z_i.z_j, less the diagonal's B unit terms: no B x B matrix.
  """
  z = z.astype(jnp.float32)
  size = z.shape[0]
  total = jnp.sum(z, axis=0)
  return (jnp.sum(total * total) - jnp.sum(z * z)) / (size * (size - 1))


def pairwise_sym_nce(student: jax.Array, teacher: jax.Array, log_scale: jax.Array) -> jax.Array:
  """student: [B, S, d], teacher: [B, T, d] unit-norm -> [] mean over the S x T crop pairs (s, t) of the symmetric
  InfoNCE between student[:, s] and teacher[:, t] (`clip_infonce`, in-batch negatives).

  All pairs at once: one [B, S, B, T] logit tensor, row-sharded like clip_infonce's [B, B] (a device holds
  B_local x S x B x T), instead of S x T separate losses (COSMOS has 80 per step): the loss's part of the program no
  longer grows with the pairs. The same values as the pair-by-pair mean, up to float rounding.
  """
  scale = jnp.exp(log_scale.astype(jnp.float32))
  student, teacher = student.astype(jnp.float32), teacher.astype(jnp.float32)
  logits = constrain_rows(scale * jnp.einsum('bsd,ctd->bsct', student, teacher))  # [B, S, B, T]
  positives = scale * jnp.einsum('bsd,btd->bst', student, teacher)  # [B, S, T]
  i2t = jax.nn.logsumexp(logits, axis=2) - positives  # [B, S, T]: each student row against every teacher row
  t2i = jax.nn.logsumexp(logits, axis=0) - jnp.moveaxis(positives, 0, 1)  # [S, B, T]: each teacher row
  return (jnp.mean(i2t) + jnp.mean(t2i)) / 2


def siglip_loss(zi: jax.Array, zt: jax.Array, log_scale: jax.Array, bias: jax.Array
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Sigmoid loss: -sum_ij log_sigmoid(y_ij (s zi_i . zt_j + b)) / B, y = +1 on the diagonal and -1 elsewhere.

  zi, zt: [B, d] unit-norm; log_scale, bias: []. The [B, B] logits are row-sharded; the diagonal is computed from
  the pairs directly, so no B x B label matrix is built.
  """
  scale = jnp.exp(log_scale.astype(jnp.float32))
  zi, zt = zi.astype(jnp.float32), zt.astype(jnp.float32)
  logits = constrain_rows(scale * zi @ zt.T + bias)  # [B, B]
  positives = scale * jnp.sum(zi * zt, axis=-1) + bias  # [B]
  # Every entry as a negative, then swap the diagonal's negative term for its positive one.
  total = jnp.sum(jax.nn.log_sigmoid(-logits)) + jnp.sum(jax.nn.log_sigmoid(positives) -
                                                         jax.nn.log_sigmoid(-positives))
  loss = -total / zi.shape[0]
  return loss, {'logit_scale': scale, 'logit_bias': bias}
