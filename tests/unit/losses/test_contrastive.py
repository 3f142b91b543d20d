"""CLIP InfoNCE against a naive numpy reference (values and gradients), invariances, and sharded == unsharded; the
all-pairs InfoNCE of COSMOS's crops against the same reference, pair by pair."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from support import unit_vectors
from vlp_jax import parallel
from vlp_jax.losses.contrastive import clip_infonce, l2_normalize, mean_offdiagonal_cosine, pairwise_sym_nce


def naive_clip_loss(zi, zt, t):
  """The paper's pseudocode: CE over rows of s*zi@zt.T and of s*zt@zi.T with labels arange, averaged."""
  logits = np.exp(t) * zi @ zt.T
  def ce(l):
    l = l - l.max(axis=1, keepdims=True)
    logp = l - np.log(np.exp(l).sum(axis=1, keepdims=True))
    return -np.mean(np.diag(logp))
  return (ce(logits) + ce(logits.T)) / 2


def naive_clip_grads(zi, zt, t):
  """Closed form: dL/dlogits = (softmax_rows - I + (softmax_cols - I)) / (2B)."""
  b = zi.shape[0]
  s = np.exp(t)
  logits = s * zi @ zt.T
  soft_rows = np.exp(logits - logits.max(1, keepdims=True))
  soft_rows /= soft_rows.sum(1, keepdims=True)
  soft_cols = np.exp(logits - logits.max(0, keepdims=True))
  soft_cols /= soft_cols.sum(0, keepdims=True)
  d_logits = (soft_rows - np.eye(b) + soft_cols - np.eye(b)) / (2 * b)
  d_zi = s * d_logits @ zt
  d_zt = s * d_logits.T @ zi
  d_t = np.sum(d_logits * logits)
  return d_zi, d_zt, d_t


@pytest.mark.parametrize('batch,dim,t', [(4, 8, np.log(1 / 0.07)), (16, 32, 0.0), (9, 5, np.log(100.0))])
def test_clip_loss_matches_naive_reference(batch, dim, t):
  rng = np.random.default_rng(batch)
  zi, zt = unit_vectors(rng, (batch, dim)), unit_vectors(rng, (batch, dim))
  loss, metrics = clip_infonce(jnp.asarray(zi, jnp.float32), jnp.asarray(zt, jnp.float32), jnp.float32(t))
  np.testing.assert_allclose(loss, naive_clip_loss(zi, zt, t), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(metrics['logit_scale'], np.exp(t), rtol=1e-6)


@pytest.mark.slow
def test_clip_loss_gradients_match_closed_form():
  rng = np.random.default_rng(0)
  zi, zt, t = unit_vectors(rng, (12, 16)), unit_vectors(rng, (12, 16)), 2.0
  grads = jax.grad(lambda a, b, c: clip_infonce(a, b, c)[0], argnums=(0, 1, 2))(
      jnp.asarray(zi, jnp.float32), jnp.asarray(zt, jnp.float32), jnp.float32(t))
  for got, want in zip(grads, naive_clip_grads(zi, zt, t)):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


@pytest.mark.slow
def test_clip_loss_numerical_gradients():
  rng = np.random.default_rng(1)
  zi, zt = jnp.asarray(unit_vectors(rng, (6, 4))), jnp.asarray(unit_vectors(rng, (6, 4)))
  with jax.enable_x64(True):
    chex.assert_numerical_grads(lambda a, b, c: clip_infonce(a, b, c)[0],
                                (zi.astype(jnp.float64), zt.astype(jnp.float64), jnp.float64(1.5)), order=1)


def test_clip_loss_invariant_to_joint_permutation_and_not_to_mismatch():
  rng = np.random.default_rng(2)
  zi, zt = unit_vectors(rng, (10, 8)).astype(np.float32), unit_vectors(rng, (10, 8)).astype(np.float32)
  perm = rng.permutation(10)
  base = clip_infonce(zi, zt, jnp.float32(2.0))[0]
  np.testing.assert_allclose(clip_infonce(zi[perm], zt[perm], jnp.float32(2.0))[0], base, rtol=1e-6)
  # Swapping the roles of image and text leaves the symmetric loss unchanged.
  np.testing.assert_allclose(clip_infonce(zt, zi, jnp.float32(2.0))[0], base, rtol=1e-6)
  # Breaking the pairing changes it.
  assert abs(float(clip_infonce(zi[perm], zt, jnp.float32(2.0))[0]) - float(base)) > 1e-3


def test_perfect_alignment_gives_low_loss():
  zi = np.eye(8, dtype=np.float32)
  loss = clip_infonce(zi, zi, jnp.float32(np.log(100.0)))[0]
  assert float(loss) < 1e-3


def test_l2_normalize():
  x = np.random.default_rng(3).normal(size=(5, 7)).astype(np.float32)
  np.testing.assert_allclose(np.linalg.norm(l2_normalize(x), axis=-1), 1.0, rtol=1e-6)


def test_row_sharded_loss_and_grads_equal_single_device():
  assert jax.device_count() == 8
  rng = np.random.default_rng(4)
  zi, zt = unit_vectors(rng, (32, 16)).astype(np.float32), unit_vectors(rng, (32, 16)).astype(np.float32)
  fn = jax.value_and_grad(lambda a, b, c: clip_infonce(a, b, c)[0], argnums=(0, 1, 2))
  want = jax.jit(fn)(zi, zt, jnp.float32(2.5))
  mesh = parallel.make_mesh(fsdp=2)
  rows = NamedSharding(mesh, P(parallel.BATCH_AXES))
  with jax.set_mesh(mesh):
    jitted = jax.jit(fn)
    got = jitted(jax.device_put(zi, rows), jax.device_put(zt, rows), jnp.float32(2.5))
    compiled = jitted.lower(jax.device_put(zi, rows), jax.device_put(zt, rows), jnp.float32(2.5)).compile()
  # Each device holds its B_local x B_global block of the logits, never the full B x B matrix.
  assert 'f32[4,32]' in compiled.as_text() and 'f32[32,32]' not in compiled.as_text()
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_pairwise_loss_is_the_mean_of_the_pairs_naive_losses_with_their_gradients():
  rng = np.random.default_rng(5)
  student, teacher = unit_vectors(rng, (6, 3, 8)).astype(np.float32), unit_vectors(rng, (6, 2, 8)).astype(np.float32)
  t = np.float32(np.log(10.0))
  want = np.mean([naive_clip_loss(student[:, s].astype(np.float64), teacher[:, c].astype(np.float64), t)
                  for s in range(3) for c in range(2)])
  np.testing.assert_allclose(pairwise_sym_nce(student, teacher, jnp.float32(t)), want, rtol=1e-5)
  # the gradients of the pair-by-pair loss (clip_infonce's own are checked against the closed form above)
  by_pairs = lambda a, b, c: jnp.mean(jnp.stack([clip_infonce(a[:, s], b[:, k], c)[0]  # noqa: E731
                                                 for s in range(3) for k in range(2)]))
  grads = jax.grad(pairwise_sym_nce, argnums=(0, 1, 2))(student, teacher, jnp.float32(t))
  chex.assert_trees_all_close(grads, jax.grad(by_pairs, argnums=(0, 1, 2))(student, teacher, jnp.float32(t)),
                              rtol=1e-5, atol=1e-6)


def test_pairwise_loss_is_row_sharded_and_equal_to_single_device():
  rng = np.random.default_rng(6)
  student, teacher = unit_vectors(rng, (32, 3, 16)).astype(np.float32), unit_vectors(rng, (32, 2, 16)).astype(np.float32)
  fn = jax.value_and_grad(pairwise_sym_nce, argnums=(0, 1, 2))
  want = jax.jit(fn)(student, teacher, jnp.float32(2.5))
  mesh = parallel.make_mesh(fsdp=2)
  rows = NamedSharding(mesh, P(parallel.BATCH_AXES))
  with jax.set_mesh(mesh):
    args = jax.device_put(student, rows), jax.device_put(teacher, rows), jnp.float32(2.5)
    got = jax.jit(fn)(*args)
    text = jax.jit(fn).lower(*args).compile().as_text()
  # Each device holds B_local x S x B x T logits, never the whole [B, S, B, T]
  assert 'f32[4,3,32,2]' in text and 'f32[32,3,32,2]' not in text
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)


def test_mean_offdiagonal_cosine_matches_a_double_loop():
  rng = np.random.default_rng(3)
  for z in (unit_vectors(rng, (9, 4)), np.tile(unit_vectors(rng, (1, 4)), (6, 1))):  # random, and all alike (1.0)
    naive = np.mean([z[i] @ z[j] for i in range(len(z)) for j in range(len(z)) if i != j])
    np.testing.assert_allclose(mean_offdiagonal_cosine(jnp.asarray(z, jnp.float32)), naive, rtol=1e-5, atol=1e-6)
