"""Linear probe on frozen image features (SaCo's protocol), read before the projection.

Features are extracted once; a linear classifier (weights and bias) is then fitted on the train features and scored
on the test features. Two fitters:

  adamw: the protocol. Softmax cross-entropy, AdamW, 90 epochs of minibatches of 1024 drawn from a per-epoch
         permutation (the last batch of an epoch is smaller, as with a PyTorch DataLoader without drop_last), lr 5e-4
         on a per-step cosine decay to 0 without warmup. The protocol does not give a weight decay: we use 0.01,
         PyTorch AdamW's default (what an unstated AdamW setting gives), on the weights only, not the bias
         (docs/methods.md §1: no decay on biases). Weights and bias start at zero, so a run is a pure function of
         the data and the seed (which only orders the minibatches). The whole loop is one jitted function.
  ridge: fast closed form. Least squares onto one-hot targets with an unpenalised bias; the L2 strength is picked
         from a small grid by top-1 accuracy on a stratified 20% held-out part of the train set, then refitted on
         all of it.

Both standardise the features first (zero mean, unit variance per dimension, with train statistics), like the
BatchNorm without affine parameters that MAE and MoCo v3 put in front of their probe head. L2-normalised embeddings
have entries near 1/sqrt(d), so without it lr 5e-4 would need far more steps to reach useful logits, and the ridge
grid would depend on the feature scale.
"""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vlp_jax.evaluation.base import evaluator
from vlp_jax.evaluation.zeroshot import topk_accuracy

METHODS = ('adamw', 'ridge')
# PyTorch AdamW's default; the protocol leaves weight decay unstated.
DEFAULT_WEIGHT_DECAY = 0.01
# Ridge strengths per train example: the penalty is l2 * N * |w|^2 against a summed squared error over N examples.
RIDGE_L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
RIDGE_HOLDOUT_FRACTION = 0.2


def standardize(train_x: np.ndarray, test_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """[N, d], [M, d] -> both shifted and scaled by the train mean and std per dimension; constant dimensions -> 0."""
  train_x = np.asarray(train_x, np.float64)
  mean, std = train_x.mean(axis=0), train_x.std(axis=0)
  std = np.where(std > 1e-12, std, 1.0)
  return (train_x - mean) / std, (np.asarray(test_x, np.float64) - mean) / std


@functools.partial(jax.jit, static_argnames=('num_classes', 'epochs', 'batch_size', 'lr', 'weight_decay'))
def train_softmax_classifier(features: jax.Array, labels: jax.Array, key: jax.Array, *, num_classes: int,
                             epochs: int, batch_size: int, lr: float, weight_decay: float) -> dict[str, jax.Array]:
  """features [N, d] float32, labels [N] int in [0, num_classes) -> {'w': [d, C], 'b': [C]} after `epochs` of AdamW.

  Every epoch visits each example once in a fresh permutation, ceil(N / batch_size) steps; the last batch is padded
  to full size with masked-out rows so that every step has one shape.
  """
  num_examples, dim = features.shape
  batch_size = min(batch_size, num_examples)
  steps_per_epoch = -(-num_examples // batch_size)
  padding = steps_per_epoch * batch_size - num_examples  # < batch_size <= N, so perm[:padding] exists
  in_epoch = (jnp.arange(steps_per_epoch * batch_size) < num_examples).reshape(steps_per_epoch, batch_size)
  schedule = optax.cosine_decay_schedule(lr, epochs * steps_per_epoch)
  optimizer = optax.adamw(schedule, weight_decay=weight_decay, mask={'w': True, 'b': False})
  params = {'w': jnp.zeros((dim, num_classes), jnp.float32), 'b': jnp.zeros((num_classes,), jnp.float32)}

  def loss(params, rows, mask):
    logits = features[rows] @ params['w'] + params['b']
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, labels[rows])
    return jnp.sum(per_example * mask) / jnp.sum(mask)

  def step(carry, batch):
    params, opt_state = carry
    grads = jax.grad(loss)(params, *batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

  def epoch(index, carry):
    perm = jax.random.permutation(jax.random.fold_in(key, index), num_examples)
    rows = jnp.concatenate([perm, perm[:padding]]).reshape(steps_per_epoch, batch_size)
    return jax.lax.scan(step, carry, (rows, in_epoch))[0]

  params, _ = jax.lax.fori_loop(0, epochs, epoch, (params, optimizer.init(params)))
  return params


def ridge_fit(x: np.ndarray, targets: np.ndarray, l2s: Sequence[float]) -> list[tuple[np.ndarray, np.ndarray]]:
  """x [N, d], targets [N, C] -> for each l2, (w [d, C], b [C]) minimising |x w + b - targets|^2 + l2 |w|^2.

  The bias is not penalised: centring x and targets removes it. One eigendecomposition of the centred Gram matrix
  serves the whole grid.
  """
  x, targets = np.asarray(x, np.float64), np.asarray(targets, np.float64)
  x_mean, target_mean = x.mean(axis=0), targets.mean(axis=0)
  centred = x - x_mean
  eigvals, eigvecs = np.linalg.eigh(centred.T @ centred)
  eigvals = np.maximum(eigvals, 0.0)  # round-off can make the zero eigenvalues of a singular Gram slightly negative
  projected = eigvecs.T @ (centred.T @ (targets - target_mean))  # [d, C]
  fits = []
  for l2 in l2s:
    w = eigvecs @ (projected / (eigvals + l2)[:, None])
    fits.append((w, target_mean - x_mean @ w))
  return fits


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
  """labels [N] -> bool [N], True for a random round(fraction * count) examples of each class."""
  rng = np.random.default_rng(seed)
  held_out = np.zeros(len(labels), bool)
  for label in np.unique(labels):
    members = rng.permutation(np.flatnonzero(labels == label))
    held_out[members[:round(fraction * len(members))]] = True
  return held_out


def ridge_classifier(train_x: np.ndarray, train_y: np.ndarray, num_classes: int, seed: int = 0,
                     l2_grid: Sequence[float] = RIDGE_L2_GRID) -> tuple[np.ndarray, np.ndarray]:
  """[N, d], [N] -> (w [d, C], b [C]): ridge onto one-hot targets, l2 (per example) chosen on a held-out split.

  Ties go to the stronger penalty. With one grid value, or nothing to hold out, there is no selection.
  """
  one_hot = np.eye(num_classes)[train_y]
  num_examples = len(train_y)
  l2 = l2_grid[-1]
  held_out = stratified_holdout(train_y, RIDGE_HOLDOUT_FRACTION, seed)
  if len(l2_grid) > 1 and 0 < held_out.sum() < num_examples:
    fit_size = num_examples - held_out.sum()
    fits = ridge_fit(train_x[~held_out], one_hot[~held_out], [g * fit_size for g in l2_grid])
    accuracies = [np.mean(np.argmax(train_x[held_out] @ w + b, axis=1) == train_y[held_out]) for w, b in fits]
    l2 = l2_grid[len(l2_grid) - 1 - int(np.argmax(accuracies[::-1]))]
  return ridge_fit(train_x, one_hot, [l2 * num_examples])[0]


def mean_per_class_accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
  """predictions [N], labels [N] -> recall averaged over the classes present in `labels`."""
  return float(np.mean([np.mean(predictions[labels == label] == label) for label in np.unique(labels)]))


def classification_metrics(logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
  """logits [N, C], labels [N] -> top-1, top-5 and mean-per-class accuracy of the probe, and the chance level of
  top-1 and mean-per-class accuracy, 1 / C."""
  return {'linear_probe_top1': topk_accuracy(logits, labels, 1),
          'linear_probe_top5': topk_accuracy(logits, labels, 5),
          'linear_probe_mean_per_class': mean_per_class_accuracy(np.argmax(logits, axis=1), labels),
          'linear_probe_chance': 1.0 / logits.shape[1]}


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, *,
                 method: str = 'adamw', epochs: int = 90, batch_size: int = 1024, lr: float = 5e-4,
                 weight_decay: float = DEFAULT_WEIGHT_DECAY, seed: int = 0, num_classes: int | None = None,
                 standardize_features: bool = True) -> dict[str, float]:
  """Fits a linear classifier on train_x [N, d], train_y [N] and scores it on test_x [M, d], test_y [M].

  Labels are ints in [0, num_classes); num_classes defaults to 1 + the largest label seen. epochs, batch_size, lr and
  weight_decay apply to 'adamw' only; seed orders its minibatches and draws the ridge hold-out split.
  Returns {'linear_probe_top1', 'linear_probe_top5', 'linear_probe_mean_per_class', 'linear_probe_chance'}.
  """
  if method not in METHODS:
    raise ValueError(f"method '{method}' is not valid; valid choices: {list(METHODS)}")
  train_y, test_y = np.asarray(train_y, np.int64), np.asarray(test_y, np.int64)
  if len(train_x) != len(train_y) or len(test_x) != len(test_y):
    raise ValueError(f'features and labels must pair up: train {len(train_x)} vs {len(train_y)}, '
                     f'test {len(test_x)} vs {len(test_y)}')
  if not len(train_y) or not len(test_y):
    raise ValueError('the linear probe needs train and test examples')
  if min(train_y.min(), test_y.min()) < 0:
    raise ValueError('the linear probe needs labels >= 0 (-1 marks unlabelled examples)')
  num_classes = num_classes or int(max(train_y.max(), test_y.max())) + 1
  if standardize_features:
    train_x, test_x = standardize(train_x, test_x)
  if method == 'ridge':
    w, b = ridge_classifier(np.asarray(train_x, np.float64), train_y, num_classes, seed)
  else:
    params = train_softmax_classifier(jnp.asarray(train_x, jnp.float32), jnp.asarray(train_y, jnp.int32),
                                      jax.random.key(seed), num_classes=num_classes, epochs=epochs,
                                      batch_size=batch_size, lr=lr, weight_decay=weight_decay)
    w, b = np.asarray(params['w'], np.float64), np.asarray(params['b'], np.float64)
  return classification_metrics(np.asarray(test_x, np.float64) @ w + b, test_y)


@evaluator('linear_probe', needs=('train_images',))
def linear_probe_evaluator(encoder, eval_set, image_emb: np.ndarray, **probe_kwargs) -> dict[str, float]:
  """The registry's evaluator: fits on `encoder.image_features` of `eval_set.train_images` and scores on those of
  `eval_set.images`.

  The probe reads the tower's features before the projection (CLIP's and SLIP's protocols), not the joint-space
  `image_emb` [M, d] that the other evaluators share, which it ignores. Needs the eval set's optional `train_images`
  [N, S, S, 3] and `train_labels` [N] (a train split of the same dataset); returns {} without them. probe_kwargs go
  to `linear_probe`.
  """
  del image_emb
  train_images = getattr(eval_set, 'train_images', None)
  train_labels = getattr(eval_set, 'train_labels', None)
  if train_images is None or train_labels is None or not len(train_labels):
    return {}
  return linear_probe(encoder.image_features(train_images), train_labels, encoder.image_features(eval_set.images),
                      eval_set.labels, **probe_kwargs)
