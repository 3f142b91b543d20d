"""SigLIP and SaCo losses against naive numpy references from the papers' pseudocode (values and gradients),
their special cases, and sharded == single-device."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from support import numeric_grad, unit_vectors
from vlp_jax import parallel
from vlp_jax.losses import affinity_consistency as saco
from vlp_jax.losses.contrastive import siglip_loss


def naive_siglip(zi, zt, t, b):
  """SigLIP pseudocode: -sum(log_sigmoid(labels * (zimg @ ztxt.T * t + b))) / n, labels = 2 * eye(n) - 1."""
  n = len(zi)
  logits = zi @ zt.T * np.exp(t) + b
  labels = 2 * np.eye(n) - 1
  return -np.sum(-np.logaddexp(0, -labels * logits)) / n


def naive_saco(zi, zt, weights=None):
  """SaCo Algorithm 1: np.sum(np.abs(SI - ST)), with optional per-sample weights w: pair (i, j) weighs w_i w_j (a
  masked sample drops out as a query and as a neighbour; test_saco_masking.py checks this by loops)."""
  diff = np.abs(zi @ zi.T - zt @ zt.T)
  if weights is not None:
    diff = diff * weights[:, None] * weights[None, :]
  return np.sum(diff)


def naive_affinity_consistency(zi, zt):
  """SaCo Eq. 3-4: per query, Pearson over the other samples j != i."""
  si, st = zi @ zi.T, zt @ zt.T
  others = lambda row, i: np.delete(row, i)  # noqa: E731
  return np.mean([np.corrcoef(others(si[i], i), others(st[i], i))[0, 1] for i in range(len(zi))])


def _grad(fn, *args):
  return jax.grad(fn, argnums=tuple(range(len(args))))(*[jnp.asarray(a, jnp.float32) for a in args])


def test_siglip_matches_naive_reference_values_and_gradients():
  rng = np.random.default_rng(0)
  zi, zt, t, b = unit_vectors(rng, (7, 5)), unit_vectors(rng, (7, 5)), np.log(10.0), -10.0
  loss, _ = siglip_loss(jnp.asarray(zi, jnp.float32), jnp.asarray(zt, jnp.float32), jnp.float32(t), jnp.float32(b))
  np.testing.assert_allclose(loss, naive_siglip(zi, zt, t, b), rtol=1e-5)
  grads = _grad(lambda a, c, s, d: siglip_loss(a, c, s, d)[0], zi, zt, t, b)
  for index, got in enumerate(grads):  # zi, zt, the learnable log scale and the learnable bias
    np.testing.assert_allclose(got, numeric_grad(naive_siglip, [zi, zt, t, b], index), rtol=1e-4, atol=1e-6)


def test_saco_matches_algorithm_1_values_and_gradients():
  rng = np.random.default_rng(1)
  zi, zt = unit_vectors(rng, (6, 4)), unit_vectors(rng, (6, 4))
  np.testing.assert_allclose(saco.saco_loss(jnp.asarray(zi), jnp.asarray(zt), normalization='sum'),
                             naive_saco(zi, zt), rtol=1e-5)  # the pseudocode's np.sum
  grads = _grad(lambda a, c: saco.saco_loss(a, c, normalization='sum'), zi, zt)
  for index, got in enumerate(grads):
    np.testing.assert_allclose(got, numeric_grad(naive_saco, [zi, zt], index), rtol=1e-4, atol=1e-5)


def test_saco_normalizations_and_scale():
  rng = np.random.default_rng(2)
  zi, zt = unit_vectors(rng, (8, 4)).astype(np.float32), unit_vectors(rng, (8, 4)).astype(np.float32)
  total = naive_saco(zi, zt)
  np.testing.assert_allclose(saco.saco_loss(zi, zt, normalization='row_mean'), total / 8, rtol=1e-5)
  np.testing.assert_allclose(saco.saco_loss(zi, zt, normalization='mean'), total / 64, rtol=1e-5)
  with pytest.raises(ValueError, match='valid choices'):
    saco.saco_loss(zi, zt, normalization='median')


def test_saco_is_zero_for_equal_modalities_and_positive_otherwise():
  rng = np.random.default_rng(3)
  z = unit_vectors(rng, (9, 6)).astype(np.float32)
  assert float(saco.saco_loss(z, z)) == 0.0
  assert float(saco.saco_loss(z, unit_vectors(rng, (9, 6)).astype(np.float32))) > 0.1
  # Invariant to a common rotation of one modality: affinities only see angles inside a modality.
  rotation = np.linalg.qr(rng.normal(size=(6, 6)))[0].astype(np.float32)
  np.testing.assert_allclose(saco.saco_loss(z @ rotation, z), 0.0, atol=1e-5)


def test_mimic_matches_reference_and_stops_teacher_gradient():
  rng = np.random.default_rng(4)
  zi, teacher = unit_vectors(rng, (6, 4)), rng.normal(size=(6, 3)) * 3  # teacher of another width, not normalised
  e = teacher / np.linalg.norm(teacher, axis=-1, keepdims=True)
  want = np.mean(np.abs(zi @ zi.T - e @ e.T))  # the per-entry mean, the default
  np.testing.assert_allclose(saco.mimic_loss(jnp.asarray(zi), jnp.asarray(teacher)), want, rtol=1e-5)
  teacher_grad = jax.grad(lambda t: saco.mimic_loss(jnp.asarray(zi, jnp.float32), t))(jnp.asarray(teacher,
                                                                                                  jnp.float32))
  assert float(jnp.abs(teacher_grad).max()) == 0.0


def test_masking_weights():
  zi = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
  zt = np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0]], np.float32)
  np.testing.assert_array_equal(saco.pair_weights(zi, zt, 'hard', 0.7), [1.0, 0.0, 0.0])
  np.testing.assert_allclose(saco.pair_weights(zi, zt, 'soft', 0.7), [1.0, 0.6, 0.0])
  assert saco.pair_weights(zi, zt, 'none', 0.7) is None
  for masking in ('hard', 'soft'):
    weights = np.asarray(saco.pair_weights(zi, zt, masking, 0.7))
    np.testing.assert_allclose(saco.saco_loss(zi, zt, weights, 'sum'), naive_saco(zi, zt, weights), rtol=1e-6)


@pytest.mark.parametrize('ramp,half', [('constant', 5.0), ('linear', 2.5), ('polynomial', 1.25),
                                       ('exponential', 5.0 * np.expm1(2.5) / np.expm1(5.0))])
def test_alpha_ramps(ramp, half):
  steps = jnp.array([0, 50, 100, 200])
  got = np.asarray([saco.ramp_weight(s, 5.0, ramp, 100) for s in steps])
  np.testing.assert_allclose(got[1], half, rtol=1e-5)
  np.testing.assert_allclose(got[2:], 5.0, rtol=1e-6)  # full weight at and after ramp_steps
  if ramp != 'constant':
    assert got[0] == 0.0


def test_affinity_consistency_matches_pearson():
  rng = np.random.default_rng(5)
  zi, zt = unit_vectors(rng, (10, 4)), unit_vectors(rng, (10, 4))
  np.testing.assert_allclose(saco.affinity_consistency(jnp.asarray(zi), jnp.asarray(zt)),
                             naive_affinity_consistency(zi, zt), rtol=1e-5)
  np.testing.assert_allclose(saco.affinity_consistency(jnp.asarray(zi), jnp.asarray(zi)), 1.0, rtol=1e-6)


@pytest.mark.parametrize('name', ['siglip', 'saco', 'mimic', 'masked_saco'])
def test_sharded_equals_single_device(name):
  rng = np.random.default_rng(6)
  zi, zt, teacher = (unit_vectors(rng, (32, 8)).astype(np.float32) for _ in range(3))
  fns = {
      'siglip': lambda a, b, s: siglip_loss(a, b, s, -2.0 * s)[0],
      'saco': lambda a, b, s: s * saco.saco_loss(a, b),
      'mimic': lambda a, b, s: s * saco.mimic_loss(a, b),
      'masked_saco': lambda a, b, s: s * saco.saco_loss(a, b, saco.pair_weights(a, b, 'soft', 0.0)),
  }
  fn = jax.value_and_grad(fns[name], argnums=(0, 1, 2))
  args = (zi, teacher if name == 'mimic' else zt, jnp.float32(1.3))
  want = jax.jit(fn)(*args)
  mesh = parallel.make_mesh(fsdp=2)
  rows = NamedSharding(mesh, P(parallel.BATCH_AXES))
  with jax.set_mesh(mesh):
    sharded = (jax.device_put(args[0], rows), jax.device_put(args[1], rows), args[2])
    got = jax.jit(fn)(*sharded)
    hlo = jax.jit(fn).lower(*sharded).compile().as_text()
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-5)
  assert 'f32[32,32]' not in hlo  # each device holds 4 x 32 rows of every B x B matrix
