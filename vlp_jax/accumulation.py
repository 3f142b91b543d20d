"""Gradient accumulation: gradients of one global batch computed in micro-batches, chosen by
`config.accumulation.mode`, and the config checks of that choice (`validate`, which config validation calls):

  'none'        features, loss and gradient of the whole batch at once.
  'decoupled'   exact for every objective (ZeroVL's decoupled accumulation, GradCache): embed every micro-batch
                without gradient; differentiate batch_features + loss on the whole batch with respect to the
                features and the parameters the loss reads itself (logit scales, biases, SLIP's head); then recompute
                each micro-batch under `jax.vjp` with the same inputs and rng, pull its feature gradient back into the
                towers and accumulate. Memory holds one micro-batch of activations plus the [B, ...] features.
  'microbatch'  the plain average of micro-batch gradients. It equals the full-batch gradient only when the loss is
                a mean of per-example losses (`Objective.per_example_loss`); `validate` refuses it otherwise.

Both micro-batch loops are `lax.scan`s, so memory does not grow with the number of micro-batches. A micro-batch takes
the same slice of every device's rows, so it stays spread over the whole mesh and no rows move between devices.
BatchNorm towers (ResNet) normalise with micro-batch statistics in both accumulating modes, as in GradCache; ViT
towers are exact.

Tower randomness: 'decoupled' gives `features` the per-example keys of the whole batch (`example_rngs`, as
`Objective.forward` does), sliced with the micro-batch rows and the same in both passes, so a stochastic tower
that draws per example (models/towers.py) gives the whole batch's features and gradient for any `num_micro`.
'microbatch' runs each micro-batch as a step of its own, with its own rng (its keys, like its `prepare`, differ
from the whole batch's: exact in distribution only).

The module sits between the objectives, whose interface (`features`, `batch_features`, `loss`) it splits, and the
config, whose validation asks it whether a mode fits the batch, the devices and the objective; the train step
(training/step.py) takes `loss_and_grad_fn`.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import PartitionSpec as P

from vlp_jax import parallel
from vlp_jax.objectives.base import example_rngs, num_rows
from vlp_jax.registry import check_choice

MODES = ('none', 'decoupled', 'microbatch')


def num_micro_batches(config: ml_collections.ConfigDict) -> int:
  """Micro-batches per step: batch_size / accumulation.micro_batch_size, or 1 without accumulation."""
  acc = config.accumulation
  return 1 if acc.mode == 'none' else config.batch_size // acc.micro_batch_size


def validate(config: ml_collections.ConfigDict, objective_cls: type, terms: dict[str, type],
             num_devices: int | None) -> None:
  """Raise ValueError naming the key when config.accumulation does not fit the batch, the devices or the objective
  (`objective_cls` and its `terms`, by name)."""
  check_choice('accumulation.mode', config.accumulation.mode, MODES)
  acc = config.accumulation
  if acc.mode == 'none':
    return
  size = acc.micro_batch_size
  if not isinstance(size, int) or isinstance(size, bool) or size < 1 or config.batch_size % size:
    raise ValueError(f"config.accumulation.mode='{acc.mode}' needs config.accumulation.micro_batch_size to be a "
                     f'positive divisor of config.batch_size={config.batch_size}, got {size!r}')
  if num_devices is not None and size % num_devices:
    raise ValueError(f'config.accumulation.micro_batch_size={size} must be divisible by the device count '
                     f'{num_devices} (every micro-batch is split over all devices)')
  if acc.mode == 'microbatch':
    coupled = [f"objective '{objective_cls.name}'"] if not objective_cls.per_example_loss else []
    coupled += [f"term '{name}'" for name, term in terms.items() if not term.per_example_loss]
    if coupled:
      raise ValueError(
          f"config.accumulation.mode='microbatch' averages micro-batch gradients, which silently changes the loss of "
          f"config.objective ({', '.join(coupled)}): its loss couples every pair of examples in the batch. Use "
          f"config.accumulation.mode='decoupled', which gives the exact full-batch gradient.")


def _num_row_shards() -> int:
  """Devices the batch rows are split over in the current (abstract) mesh; 1 outside a mesh."""
  mesh = jax.sharding.get_abstract_mesh()
  return 1 if mesh.empty else parallel.num_batch_shards(mesh)


def _constrain(x: jax.Array, spec: P) -> jax.Array:
  return x if jax.sharding.get_abstract_mesh().empty else jax.lax.with_sharding_constraint(x, spec)


def split_micro_batches(tree: Any, num_micro: int, num_shards: int | None = None) -> Any:
  """Every [B, ...] leaf -> [num_micro, B / num_micro, ...].

  Micro-batch i holds rows [i c, (i + 1) c) of each of the `num_shards` contiguous device blocks (c = B / (num_micro
  num_shards)), so every micro-batch is spread over all devices. `merge_micro_batches` is the inverse.
  """
  shards = _num_row_shards() if num_shards is None else num_shards

  def split(x):
    rows, rest = x.shape[0], x.shape[1:]
    if rows % (num_micro * shards):
      raise ValueError(f'batch of {rows} rows does not split into {num_micro} micro-batches over {shards} devices')
    c = rows // (num_micro * shards)
    y = x.reshape(shards, num_micro, c, *rest).swapaxes(0, 1).reshape(num_micro, shards * c, *rest)
    return _constrain(y, P(None, parallel.BATCH_AXES))
  return jax.tree.map(split, tree)


def merge_micro_batches(tree: Any, num_shards: int | None = None) -> Any:
  """Every [num_micro, b, ...] leaf -> [num_micro b, ...] in the original row order (inverse of the split)."""
  shards = _num_row_shards() if num_shards is None else num_shards

  def merge(y):
    num_micro, b, rest = y.shape[0], y.shape[1], y.shape[2:]
    x = y.reshape(num_micro, shards, b // shards, *rest).swapaxes(0, 1).reshape(num_micro * b, *rest)
    return _constrain(x, P(parallel.BATCH_AXES))
  return jax.tree.map(merge, tree)


def _loss_and_grad_whole(objective, params, model_state, batch, rng, step):
  """'none': (loss, metrics, model_state, grads) of the whole batch."""
  def loss_fn(p):
    features, new_state = objective.forward(p, model_state, batch, rng, train=True)
    loss, metrics = objective.loss(features, p, step)
    return loss, (metrics, new_state)
  (loss, (metrics, new_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
  return loss, metrics, new_state, grads


def _loss_and_grad_decoupled(objective, params, model_state, batch, rng, step, num_micro):
  """'decoupled': the exact full-batch (loss, metrics, model_state, grads), computed in `num_micro` passes."""
  prepared = objective.prepared(batch, rng, train=True)  # rngs as Objective.forward
  micro = split_micro_batches(prepared, num_micro)
  # Row r's key is the whole batch's, in micro-batch i and in both passes (embed, backprop).
  micro_rngs = split_micro_batches(example_rngs(rng, num_rows(prepared)), num_micro)

  def embed(state, inputs):
    micro_batch, micro_rng = inputs
    features, state = objective.features(params, state, micro_batch, micro_rng, train=True)
    return state, jax.lax.stop_gradient(features)
  state_after_towers, micro_features = jax.lax.scan(embed, model_state, (micro, micro_rngs))
  features = merge_micro_batches(micro_features)

  def loss_of_features(features, p):
    features, new_state = objective.batch_features(features, p, state_after_towers, train=True)
    loss, metrics = objective.loss(features, p, step)
    return loss, (metrics, new_state)
  (loss, (metrics, new_state)), (feature_grads, grads) = jax.value_and_grad(
      loss_of_features, argnums=(0, 1), has_aux=True)(features, params)

  def backprop(carry, inputs):
    state, accumulated = carry
    micro_batch, micro_rng, cotangent = inputs
    _, pullback, state = jax.vjp(lambda p: objective.features(p, state, micro_batch, micro_rng, train=True),
                                 params, has_aux=True)
    (micro_grads,) = pullback(cotangent)
    return (state, jax.tree.map(jnp.add, accumulated, micro_grads)), None
  (_, grads), _ = jax.lax.scan(backprop, (model_state, grads),
                               (micro, micro_rngs, split_micro_batches(feature_grads, num_micro)))
  return loss, metrics, new_state, grads


def _loss_and_grad_microbatch(objective, params, model_state, batch, rng, step, num_micro):
  """'microbatch': the mean over micro-batches of each one's (loss, metrics, gradient); model state carried."""
  micro = split_micro_batches(batch, num_micro)
  micro_rngs = jax.random.split(rng, num_micro)

  def one(state, inputs):
    micro_batch, micro_rng = inputs
    loss, metrics, state, grads = _loss_and_grad_whole(objective, params, state, micro_batch, micro_rng, step)
    return state, (loss, metrics, grads)
  model_state, (losses, metrics, grads) = jax.lax.scan(one, model_state, (micro, micro_rngs))
  mean = lambda x: jnp.mean(x, axis=0)  # noqa: E731
  return mean(losses), jax.tree.map(mean, metrics), model_state, jax.tree.map(mean, grads)


def loss_and_grad_fn(mode: str, num_micro: int = 1) -> Callable:
  """(objective, params, model_state, batch, rng, step) -> (loss, metrics, model_state, grads) for `mode`."""
  check_choice('accumulation.mode', mode, MODES)
  if mode == 'none' or num_micro == 1:
    return _loss_and_grad_whole
  if mode == 'decoupled':
    return lambda *args: _loss_and_grad_decoupled(*args, num_micro)
  return lambda *args: _loss_and_grad_microbatch(*args, num_micro)
