"""The captioning decoder's loss (LocCa / CapPa): token cross-entropy over the target positions a loss mask selects.

Normalisation. big_vision's captioning trainer (the reference code of CapPa, LocCa and SigLIP 2's decoder) divides
each sequence's summed cross-entropy by that sequence's number of target tokens and then averages over sequences
(`weighted_softmax_xent(normalize=True)`): every caption weighs the same whatever its length. That is
normalize='sequence', the default here; rows without a target token (a region task of an example without regions)
are left out of the average rather than counted as 0. normalize='token' is the other common choice: one mean over
every target token of the batch, so long sequences weigh more. The papers' text says neither.

Parallel prediction (CapPa) changes the decoder's inputs and attention, not the loss: a parallel row has the same
targets and the same cross-entropy. `captioning_loss` reports the two kinds of rows apart (their losses differ a lot:
predicting every token at once from the image alone is harder).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

NORMALIZATIONS = ('sequence', 'token')


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits: [..., L, V], targets: [..., L] int -> [..., L] float32, -log softmax(logits)[target]."""
  logits = logits.astype(jnp.float32)
  target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return jax.nn.logsumexp(logits, axis=-1) - target_logit


def sequence_nll(logits: jax.Array, targets: jax.Array, loss_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """logits: [..., L, V], targets: [..., L], loss_mask: [..., L] (1 at target positions) -> (the mean cross-entropy
  of each sequence over its target positions [...] (0 for a sequence without any), its target count [...])."""
  weights = loss_mask.astype(jnp.float32)
  count = jnp.sum(weights, axis=-1)
  total = jnp.sum(token_nll(logits, targets) * weights, axis=-1)
  return total / jnp.maximum(count, 1.0), count


def reduce_sequence_losses(per_sequence: jax.Array, tokens: jax.Array, parallel: jax.Array | None = None,
                           normalize: str = 'sequence', count: jax.Array | None = None
                           ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The batch loss from each sequence's mean cross-entropy and target count (`sequence_nll`), any shape S alike.

  per_sequence, tokens: [...]; parallel: None or [...] bool. normalize 'sequence': the mean over sequences with a
  target of their means; 'token': the mean over every target token. `count`: what to divide the sum by ('sequence':
  the number of sequences with a target; 'token': the number of target tokens); None for this batch's own, or the
  whole batch's when this is one micro-batch of it (then micro-batch losses add up to the batch's).
  Returns (loss [], metrics: with `parallel`, 'loss_parallel' / 'loss_autoregressive' (each kind's mean sequence
  loss; 0 where the batch has none) and 'parallel_fraction' (of sequences with a target)).
  """
  if normalize not in NORMALIZATIONS:
    raise ValueError(f"unknown captioning loss normalisation '{normalize}'; valid choices: {list(NORMALIZATIONS)}")
  has_targets = (tokens > 0).astype(jnp.float32)
  if normalize == 'sequence':
    local = jnp.sum(has_targets)
    loss = jnp.sum(per_sequence) / jnp.maximum(local if count is None else count, 1.0)
  else:
    local = jnp.sum(tokens)
    loss = jnp.sum(per_sequence * tokens) / jnp.maximum(local if count is None else count, 1.0)
  metrics = {}
  if parallel is not None:
    in_parallel = parallel.astype(jnp.float32) * has_targets
    in_order = (1.0 - parallel.astype(jnp.float32)) * has_targets
    metrics['loss_parallel'] = jnp.sum(per_sequence * in_parallel) / jnp.maximum(jnp.sum(in_parallel), 1.0)
    metrics['loss_autoregressive'] = jnp.sum(per_sequence * in_order) / jnp.maximum(jnp.sum(in_order), 1.0)
    metrics['parallel_fraction'] = jnp.sum(in_parallel) / jnp.maximum(jnp.sum(has_targets), 1.0)
  return loss, metrics


def correct_tokens(logits: jax.Array, targets: jax.Array, loss_mask: jax.Array) -> jax.Array:
  """logits: [..., L, V], targets, loss_mask: [..., L] -> [...] float32, the target positions where the argmax is the
  target."""
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return jnp.sum(correct * loss_mask.astype(jnp.float32), axis=-1)


def captioning_loss(logits: jax.Array, targets: jax.Array, loss_mask: jax.Array, parallel: jax.Array | None = None,
                    normalize: str = 'sequence', count: jax.Array | None = None
                    ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The decoder loss over a batch of sequences: `sequence_nll`, then `reduce_sequence_losses`.

  logits: [..., L, V] (any leading shape S: [B, T] for T tasks per image); targets: [..., L] int; loss_mask: [..., L]
  (1 where a target is trained); parallel: None or [...] bool, the rows predicted in parallel (for the metrics only).
  normalize and count: as `reduce_sequence_losses`. Returns (loss [], metrics: 'token_accuracy' (argmax = target over
  target tokens) and `reduce_sequence_losses`'s).
  """
  per_sequence, tokens = sequence_nll(logits, targets, loss_mask)
  loss, metrics = reduce_sequence_losses(per_sequence, tokens, parallel, normalize, count)
  accuracy = jnp.sum(correct_tokens(logits, targets, loss_mask)) / jnp.maximum(jnp.sum(tokens), 1.0)
  return loss, {'token_accuracy': accuracy, **metrics}
