"""SaCo sample-wise masking (supplementary §5, strategy 2) against a naive numpy reference written from the paper's
words: "the element '0' in the binary mask denotes the corresponding pair is ignored when computing the SaCo loss".
A masked image-text pair is ignored as a query (its row of the affinity distance) and as a neighbour (its column in
every other row), so it gets no gradient from the term, and the 'mean' divides by the kept pairs, not B^2."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import numeric_grad, unit_vectors
from vlp_jax.losses import affinity_consistency as saco

THRESHOLD = 0.5


def naive_sample_weights(zi, zt, masking, threshold=THRESHOLD):
  """Per image-text pair: its image-text cosine thresholded ('hard') or used as the weight ('soft', in [0, 1])."""
  weights = []
  for i in range(len(zi)):
    cosine = float(np.dot(zi[i], zt[i]))
    weights.append((1.0 if cosine > threshold else 0.0) if masking == 'hard' else min(max(cosine, 0.0), 1.0))
  return np.array(weights)


def naive_masked_saco(zi, zt, weights, normalization):
  """sum over pairs (i, j) of w_i w_j |<I_i, I_j> - <T_i, T_j>|, by loops: a pair counts only as much as both of its
  samples do. 'mean' divides by the total pair weight (the kept pairs), 'row_mean' by the kept samples."""
  total, kept_pairs = 0.0, 0.0
  for i in range(len(zi)):
    for j in range(len(zi)):
      m = weights[i] * weights[j]
      total += m * abs(np.dot(zi[i], zi[j]) - np.dot(zt[i], zt[j]))
      kept_pairs += m
  if normalization == 'sum':
    return total
  if normalization == 'row_mean':
    return total / np.sum(weights)
  return total / kept_pairs


def _batch(seed=0, n=8, d=5):
  """Image and text embeddings whose pairs range from aligned (cosine near 1) to unrelated, so that a threshold of 0.5
  masks some and keeps others."""
  rng = np.random.default_rng(seed)
  zi = unit_vectors(rng, (n, d))
  noise = np.linspace(0.1, 3.0, n)[:, None] * rng.normal(size=(n, d))
  zt = zi + noise
  return zi, zt / np.linalg.norm(zt, axis=-1, keepdims=True)


def test_batch_has_kept_and_masked_pairs():
  zi, zt = _batch()
  weights = naive_sample_weights(zi, zt, 'hard')
  assert 2 <= weights.sum() <= len(zi) - 2
  np.testing.assert_array_equal(saco.pair_weights(jnp.asarray(zi), jnp.asarray(zt), 'hard', THRESHOLD), weights)
  np.testing.assert_allclose(saco.pair_weights(jnp.asarray(zi), jnp.asarray(zt), 'soft', THRESHOLD),
                             naive_sample_weights(zi, zt, 'soft'), rtol=1e-6)


@pytest.mark.parametrize('masking', ['hard', 'soft'])
@pytest.mark.parametrize('normalization', ['sum', 'row_mean', 'mean'])
def test_masked_saco_matches_pairwise_reference(masking, normalization):
  zi, zt = _batch(1)
  weights = saco.pair_weights(jnp.asarray(zi), jnp.asarray(zt), masking, THRESHOLD)
  got = saco.saco_loss(jnp.asarray(zi), jnp.asarray(zt), weights, normalization)
  want = naive_masked_saco(zi, zt, naive_sample_weights(zi, zt, masking), normalization)
  np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize('normalization', ['sum', 'row_mean', 'mean'])
def test_hard_masking_equals_the_loss_on_the_kept_samples_alone(normalization):
  zi, zt = _batch(2)
  keep = naive_sample_weights(zi, zt, 'hard') > 0
  weights = saco.pair_weights(jnp.asarray(zi), jnp.asarray(zt), 'hard', THRESHOLD)
  np.testing.assert_allclose(saco.saco_loss(jnp.asarray(zi), jnp.asarray(zt), weights, normalization),
                             saco.saco_loss(jnp.asarray(zi[keep]), jnp.asarray(zt[keep]), None, normalization),
                             rtol=1e-5)


@pytest.mark.parametrize('masking', ['hard', 'soft'])
def test_masked_sample_gets_no_gradient_from_saco(masking):
  zi, zt = _batch(3)
  fixed = naive_sample_weights(zi, zt, masking)
  masked = fixed == 0.0
  if masking == 'soft':  # soft weights are 0 only for a non-positive cosine: make one pair anti-aligned
    zt[0], fixed[0], masked[0] = -zi[0], 0.0, True
  assert masked.any() and not masked.all()

  def loss(a, b):
    return saco.saco_loss(a, b, saco.pair_weights(a, b, masking, THRESHOLD), 'sum')

  grads = jax.grad(loss, argnums=(0, 1))(jnp.asarray(zi, jnp.float32), jnp.asarray(zt, jnp.float32))
  for index, got in enumerate(grads):
    got = np.asarray(got)
    assert np.all(got[masked] == 0.0), f'masked samples got a gradient through argument {index}'
    assert np.abs(got[~masked]).max() > 1e-3
    # The weights are a criterion, not a target: no gradient flows through them (the reference holds them fixed).
    want = numeric_grad(lambda a, b: naive_masked_saco(a, b, fixed, 'sum'), [zi, zt], index)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_nothing_kept_gives_zero_loss_and_zero_gradient():
  zi, zt = _batch(4)
  zeros = jnp.zeros(len(zi))
  for normalization in ('sum', 'row_mean', 'mean'):
    value, grads = jax.value_and_grad(lambda a, b: saco.saco_loss(a, b, zeros, normalization), argnums=(0, 1))(
        jnp.asarray(zi, jnp.float32), jnp.asarray(zt, jnp.float32))
    assert float(value) == 0.0
    assert all(np.all(np.asarray(g) == 0.0) for g in grads)
