"""The decoder's token cross-entropy (losses/caption_cross_entropy.py) against a naive numpy reference: values and
gradients."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlp_jax.losses import caption_cross_entropy as captioning

SHAPE, VOCAB = (3, 2, 5), 7  # [B, T, L] sequences, V


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  logits = rng.standard_normal((*SHAPE, VOCAB)) * 2
  targets = rng.integers(0, VOCAB, SHAPE)
  mask = (rng.random(SHAPE) < 0.6).astype(np.float64)
  mask[0, 1] = 0  # a sequence without targets (a region task without regions)
  mask[1, 0] = 1
  parallel = np.zeros(SHAPE[:2], bool)
  parallel[2, 0] = parallel[1, 0] = True
  return logits, targets, mask, parallel


def _reference(logits, targets, mask, normalize):
  """Loops over sequences and tokens, straight from the definition."""
  sequence_means, token_losses = [], []
  for index in np.ndindex(*mask.shape[:-1]):
    losses = []
    for t in range(mask.shape[-1]):
      if mask[index][t]:
        row = logits[index][t]
        losses.append(np.log(np.sum(np.exp(row))) - row[targets[index][t]])
    if losses:
      sequence_means.append(np.mean(losses))
      token_losses += losses
  return np.mean(sequence_means) if normalize == 'sequence' else np.mean(token_losses)


def _reference_gradient(logits, targets, mask, normalize):
  """d loss / d logits: (softmax - onehot) at each target token, times that token's weight in the mean."""
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  onehot = np.eye(VOCAB)[targets]
  counts = mask.sum(-1, keepdims=True)
  if normalize == 'sequence':
    weight = mask / np.maximum(counts, 1) / np.sum(counts > 0)
  else:
    weight = mask / mask.sum()
  return (probs - onehot) * weight[..., None]


@functools.lru_cache(maxsize=None)
def _results() -> dict:
  """Every value the tests check, from one compiled program: per normalisation the loss, its gradient, the metrics
  and the sum of the micro-batch losses (one example each) divided by the batch's count."""
  logits, targets, mask, parallel = _batch()
  counts = {'sequence': np.sum(mask.sum(-1) > 0), 'token': mask.sum()}

  @jax.jit
  def run(logits, targets, mask, parallel):
    out = {}
    for normalize in captioning.NORMALIZATIONS:
      loss_fn = lambda x: captioning.captioning_loss(x, targets, mask, parallel, normalize=normalize)  # noqa: B023
      (loss, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(logits)
      parts = sum(captioning.captioning_loss(logits[i:i + 1], targets[i:i + 1], mask[i:i + 1],
                                             normalize=normalize, count=counts[normalize])[0]
                  for i in range(SHAPE[0]))
      out[normalize] = {'loss': loss, 'grad': grad, 'metrics': metrics, 'micro_batches': parts}
    return out
  return jax.tree.map(np.asarray, run(jnp.asarray(logits, jnp.float32), jnp.asarray(targets), jnp.asarray(mask),
                                      jnp.asarray(parallel)))


@pytest.mark.parametrize('normalize', captioning.NORMALIZATIONS)
def test_loss_and_gradient_match_the_reference(normalize):
  logits, targets, mask, _ = _batch()
  result = _results()[normalize]
  np.testing.assert_allclose(result['loss'], _reference(logits, targets, mask, normalize), rtol=1e-5)
  np.testing.assert_allclose(result['grad'], _reference_gradient(logits, targets, mask, normalize), atol=1e-6)


def test_the_two_normalisations_weigh_long_sequences_differently():
  assert abs(float(_results()['sequence']['loss']) - float(_results()['token']['loss'])) > 1e-3
  logits, targets, mask, _ = _batch()
  with pytest.raises(ValueError, match="normalisation 'mean'"):
    captioning.captioning_loss(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(mask), normalize='mean')


@pytest.mark.parametrize('normalize', captioning.NORMALIZATIONS)
def test_micro_batches_with_the_batch_count_add_up_to_the_batch_loss(normalize):
  np.testing.assert_allclose(_results()[normalize]['micro_batches'], _results()[normalize]['loss'], rtol=1e-5)


def test_parallel_and_autoregressive_rows_are_reported_apart():
  logits, targets, mask, parallel = _batch()
  metrics = _results()['sequence']['metrics']
  per_sequence = {index: _reference(logits[index][None], targets[index][None], mask[index][None], 'sequence')
                  for index in np.ndindex(*SHAPE[:2]) if mask[index].sum()}
  in_parallel = [v for k, v in per_sequence.items() if parallel[k]]
  in_order = [v for k, v in per_sequence.items() if not parallel[k]]
  np.testing.assert_allclose(metrics['loss_parallel'], np.mean(in_parallel), rtol=1e-5)
  np.testing.assert_allclose(metrics['loss_autoregressive'], np.mean(in_order), rtol=1e-5)
  np.testing.assert_allclose(metrics['parallel_fraction'], len(in_parallel) / len(per_sequence), rtol=1e-6)
  correct = (logits.argmax(-1) == targets) * mask
  np.testing.assert_allclose(metrics['token_accuracy'], correct.sum() / mask.sum(), rtol=1e-6)
