"""SaCo: sample-wise affinity consistency (SaCo paper, Eq. 5 and Algorithm 1/2), as pure functions.

Affinities inside the batch, SI = zi zi^T and ST = zt zt^T ([B, B], row-sharded over the mesh), and
  L_saco  = sum_ij m_ij |SI_ij - ST_ij|                 (m_ij = w_i w_j; all 1 unless sample-wise masking is on)
  L_mimic = sum_ij |SI_ij - S~I_ij|,  S~I = e e^T       (e: L2-normalised embeddings of a frozen teacher)
The pseudocode sums over all B*B entries ('sum'); 'row_mean' divides by B and 'mean' (the default, the scale of the
paper's Figure 3b; see objectives/saco.py) by B*B,
so alpha_sum * L_sum == (alpha_sum * B) * L_row_mean == (alpha_sum * B^2) * L_mean: alpha multiplies the
normalised value, and keeping its effect when switching normalisation means scaling alpha by B or B^2.

Sample-wise masking (supplementary §5, strategy 2: a masked image-text pair "is ignored when computing the SaCo
loss") drops sample i both as a query (row i) and as a neighbour (column i of every other row), so it gets no
gradient from the term. B is then the kept count K = sum_i w_i: 'row_mean' divides by K and 'mean' by
K^2 = sum_ij m_ij (the kept pairs, the zero diagonal counted as in B^2), so hard masking gives exactly the loss of
the kept sub-batch; 'sum' sums over the kept pairs only.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from vlp_jax.parallel import constrain_rows

NORMALIZATIONS = ('sum', 'row_mean', 'mean')
RAMPS = ('constant', 'linear', 'exponential', 'polynomial')
MASKINGS = ('none', 'hard', 'soft')


def affinity(z: jax.Array) -> jax.Array:
  """[B, d] unit-norm embeddings -> [B, B] cosine affinities, row-sharded."""
  z = z.astype(jnp.float32)
  return constrain_rows(z @ z.T)


def _off_diagonal_abs(a: jax.Array, b: jax.Array) -> jax.Array:
  """|a - b| for [B, B] affinities with the diagonal zeroed. For unit vectors the diagonal is |1 - 1| = 0; dropping
  it keeps float rounding there (a sign(+-1e-7)) from adding a spurious radial gradient. The mask comes from iota,
  so it is built shard by shard."""
  rows = jax.lax.broadcasted_iota(jnp.int32, a.shape, 0)
  cols = jax.lax.broadcasted_iota(jnp.int32, a.shape, 1)
  return jnp.where(rows == cols, 0.0, jnp.abs(a - b))


def _normalize(total: jax.Array, count: int | jax.Array, normalization: str) -> jax.Array:
  """total: [] sum of the (kept) entries; count: the (kept) samples, B or sum_i w_i -> [] 'sum': total; 'row_mean':
  total / count; 'mean': total / count^2. With nothing kept, total is 0 and so is the result (no 0 / 0)."""
  if normalization == 'sum':
    return total
  if normalization == 'row_mean':
    divisor = count
  elif normalization == 'mean':
    divisor = count * count
  else:
    raise ValueError(f"normalization '{normalization}' is not valid; valid choices: {list(NORMALIZATIONS)}")
  if isinstance(divisor, int):
    return total / divisor
  return total / jnp.where(divisor > 0, divisor, 1.0)


def pair_mask(weights: jax.Array) -> jax.Array:
  """[B] per-sample weights -> [B, B] pair weights m_ij = w_i w_j, row-sharded, without gradient. Hard (0/1)
  weights keep a pair only when both of its samples are kept; soft weights give the pair the product of the two."""
  w = jax.lax.stop_gradient(weights.astype(jnp.float32))
  return constrain_rows(w[:, None] * w[None, :])


def saco_loss(zi: jax.Array, zt: jax.Array, weights: jax.Array | None = None, normalization: str = 'mean'
              ) -> jax.Array:
  """zi, zt: [B, d] unit-norm; weights: optional [B] per-sample weights (`pair_weights`) -> [] the L1 distance
  sum_ij m_ij |SI_ij - ST_ij| over the kept pairs (m = `pair_mask(weights)`), normalised by the kept count
  K = sum_i w_i (B without weights): 'sum' as is, 'row_mean' / K, 'mean' / K^2 = / sum_ij m_ij."""
  diff = _off_diagonal_abs(affinity(zi), affinity(zt))  # [B, B]
  if weights is None:
    return _normalize(jnp.sum(diff), zi.shape[0], normalization)
  kept = jnp.sum(jax.lax.stop_gradient(weights.astype(jnp.float32)))
  return _normalize(jnp.sum(diff * pair_mask(weights)), kept, normalization)


def mimic_loss(zi: jax.Array, teacher: jax.Array, normalization: str = 'mean') -> jax.Array:
  """zi: [B, d] student image embeddings; teacher: [B, d_t] teacher embeddings (normalised here, no gradient)."""
  e = jax.lax.stop_gradient(teacher.astype(jnp.float32))
  e = e / jnp.linalg.norm(e, axis=-1, keepdims=True)
  return _normalize(jnp.sum(_off_diagonal_abs(affinity(zi), affinity(e))), zi.shape[0], normalization)


def pair_weights(zi: jax.Array, zt: jax.Array, masking: str, threshold: float) -> jax.Array | None:
  """Sample-wise masking (supplementary §5, strategy 2): [B] weights from each image-text pair's cosine, without
  gradient (a criterion of the pair's reliability, not something to optimise). 'hard': 1 where the cosine exceeds
  `threshold`, else 0 (the paper thresholds without giving a value; 0.5 in objectives/saco.py is our choice).
  'soft': the cosine itself, clipped to [0, 1] (the paper: "as the similarity ranges from 0 to 1"). `saco_loss`
  turns them into pair weights w_i w_j."""
  if masking == 'none':
    return None
  cosine = jax.lax.stop_gradient(jnp.sum(zi.astype(jnp.float32) * zt.astype(jnp.float32), axis=-1))
  if masking == 'hard':
    return (cosine > threshold).astype(jnp.float32)
  if masking == 'soft':
    return jnp.clip(cosine, 0.0, 1.0)
  raise ValueError(f"masking '{masking}' is not valid; valid choices: {list(MASKINGS)}")


def ramp_weight(step: jax.Array, alpha: float, ramp: str, ramp_steps: int, power: float = 2.0,
                rate: float = 5.0) -> jax.Array:
  """alpha at `step` (supplementary, strategy 1), with progress t = min(step / ramp_steps, 1):
  constant alpha; linear alpha t; polynomial alpha t^power; exponential alpha (e^(rate t) - 1) / (e^rate - 1)."""
  t = jnp.clip(jnp.asarray(step, jnp.float32) / max(ramp_steps, 1), 0.0, 1.0)
  if ramp == 'constant':
    return jnp.float32(alpha)
  if ramp == 'linear':
    return alpha * t
  if ramp == 'polynomial':
    return alpha * t**power
  if ramp == 'exponential':
    return alpha * jnp.expm1(rate * t) / math.expm1(rate)
  raise ValueError(f"ramp '{ramp}' is not valid; valid choices: {list(RAMPS)}")


def affinity_consistency(zi: jax.Array, zt: jax.Array) -> jax.Array:
  """Mean over queries i of Pearson(SI_i, ST_i) over the other samples j != i (SaCo Eq. 3 and 4; the shared
  SI_ii = ST_ii = 1 would inflate it) of the given set: [] in [-1, 1]. zi, zt: [B, d] unit-norm."""
  si, st = affinity(zi), affinity(zt)
  rows = jax.lax.broadcasted_iota(jnp.int32, si.shape, 0)
  others = rows != jax.lax.broadcasted_iota(jnp.int32, si.shape, 1)
  count = si.shape[0] - 1
  si = jnp.where(others, si - jnp.sum(jnp.where(others, si, 0.0), axis=1, keepdims=True) / count, 0.0)
  st = jnp.where(others, st - jnp.sum(jnp.where(others, st, 0.0), axis=1, keepdims=True) / count, 0.0)
  rho = jnp.sum(si * st, axis=1) * jax.lax.rsqrt(jnp.sum(si * si, axis=1) * jnp.sum(st * st, axis=1) + 1e-12)
  return jnp.mean(rho)
