"""AdamW with a weight-decay mask, warmup + cosine schedule, and the logit-scale clamp (optax); locked towers and
layer-wise learning-rate decay per tower (config.optim.lock_* and *_layer_decay; docs/usage.md)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vlp_jax.models import groups
from vlp_jax.objectives.base import MAX_LOG_LOGIT_SCALE
from vlp_jax.parallel import stacked_axes


def learning_rate_schedule(optim: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Linear warmup from `warmup_init_lr` to `lr` over `warmup_steps`, then cosine (or constant) to `lr * end_factor`."""
  if optim.schedule == 'constant':
    return optax.join_schedules(
        [optax.linear_schedule(optim.warmup_init_lr, optim.lr, max(optim.warmup_steps, 1)),
         optax.constant_schedule(optim.lr)], [optim.warmup_steps])
  return optax.warmup_cosine_decay_schedule(
      init_value=optim.warmup_init_lr, peak_value=optim.lr, warmup_steps=optim.warmup_steps,
      decay_steps=max(total_steps, optim.warmup_steps + 1), end_value=optim.lr * optim.end_factor)


def weight_decay_mask(params: dict) -> dict:
  """True where weight decay applies: matrices and kernels (ndim >= 2, not counting the layer axis of scanned
  blocks). Gains, biases, the class embedding (ndim 1) and logit scales (ndim 0) are never decayed."""
  return jax.tree_util.tree_map_with_path(lambda path, p: jnp.ndim(p) - stacked_axes(path) >= 2, params)


def _tower_options(optim: ml_collections.ConfigDict) -> dict[str, tuple[bool, int, float]]:
  """{tower: (locked, unlocked groups, layer decay)} from config.optim."""
  return {groups.IMAGE: (optim.lock_image, optim.lock_image_unlocked_groups, optim.image_layer_decay),
          groups.TEXT: (optim.lock_text, optim.lock_text_unlocked_layers, optim.text_layer_decay)}


def _along_layers(values: np.ndarray, ndim: int) -> np.ndarray:
  """A per-leaf value that broadcasts against its leaf: a scalar stays one; the per-row vector [n] of a stacked leaf
  (scanned layout) becomes [n, 1, ..., 1], one value per block along the layer axis."""
  return values if values.ndim == 0 else values.reshape(values.shape + (1,) * (ndim - 1))


def _no_positions(tower: str, option: str) -> ValueError:
  # Validation refuses such a config first; this guards an optimizer built from an unvalidated one.
  return ValueError(f'config.optim.{option} needs a transformer {tower} tower, whose blocks it counts; this '
                    'parameter tree has none (a ResNet image tower locks whole and has no layers)')


def trainable_masks(params: Any, optim: ml_collections.ConfigDict) -> Any:
  """For every leaf of `params` (or a tree of its structure): a numpy bool array, True where the parameter trains,
  False where its tower is locked. Shape () or, for a stacked leaf of the scanned layout, [L-1, 1, ..., 1]: one per
  block, since the blocks a stacked leaf holds can be locked and unlocked apart.

  A locked tower (`optim.lock_image` / `lock_text`) keeps its last `lock_image_unlocked_groups` /
  `lock_text_unlocked_layers` of open_clip's L + 2 lock groups trainable (models/groups.py: the embeddings, blocks
  0 .. L-2, the last block with the final LayerNorm, the projection); 0 locks it whole, a ResNet image tower too.
  Parameters outside the towers always train."""
  options, depths = _tower_options(optim), {tower: groups.num_blocks(params, tower) for tower in groups.TOWERS}

  def mask(path, leaf):
    tower = groups.tower_of(path)
    if tower is None or not options[tower][0]:
      return np.array(True)
    unlocked, depth = options[tower][1], depths[tower]
    if not unlocked:
      return np.array(False)
    if depth is None:
      raise _no_positions(tower, 'lock_image_unlocked_groups' if tower == groups.IMAGE else 'lock_text_unlocked_layers')
    return _along_layers(groups.lock_groups(path, depth) >= depth + 2 - unlocked, np.ndim(leaf))
  return jax.tree_util.tree_map_with_path(mask, params)


def layer_decay_scales(params: Any, optim: ml_collections.ConfigDict) -> Any:
  """For every leaf of `params` (or a tree of its structure): its learning-rate multiplier, a float32 numpy array of
  shape () or, for a stacked leaf, [L-1, 1, ..., 1] (one per block).

  A parameter of layer id i in a tower of L blocks with decay d (`optim.image_layer_decay` / `text_layer_decay`)
  gets d ** (L + 1 - i): i = 0 for the embeddings, 1 .. L for the blocks, L + 1 for the final LayerNorm and
  projection (models/groups.py), so the last layers train at the full rate and each layer below at d times the one
  above. This is BEiT's rule (unilm beit/run_class_finetuning.py: `layer_decay ** (num_layers + 1 - i)` over
  `get_num_layer_for_vit`'s ids) and timm's (`param_groups_layer_decay`: `layer_decay ** (layer_max - i)`, the
  ViT's `group_matcher` putting the stem at 0 and the final norm at layer_max = L + 1). Our `ln_pre` counts with the
  embeddings, as open_clip groups it. Parameters outside the towers (logit scale and bias, objective heads), and
  every parameter of a tower whose decay is 1, get exactly 1."""
  options, depths = _tower_options(optim), {tower: groups.num_blocks(params, tower) for tower in groups.TOWERS}

  def scale(path, leaf):
    tower = groups.tower_of(path)
    decay = options[tower][2] if tower is not None else 1.0
    if decay == 1.0:
      return np.array(1.0, np.float32)
    depth = depths[tower]
    if depth is None:
      raise _no_positions(tower, f'{tower}_layer_decay')
    return _along_layers((decay ** (depth + 1 - groups.layer_ids(path, depth))).astype(np.float32), np.ndim(leaf))
  return jax.tree_util.tree_map_with_path(scale, params)


def _per_leaf(transform: Callable[[jax.Array, np.ndarray], jax.Array], values_of: Callable[[Any], Any]
              ) -> optax.GradientTransformation:
  """A stateless transformation: each update leaf u becomes transform(u, v), v its leaf of values_of(updates)
  (numpy constants, computed from the tree's paths and shapes at trace time)."""
  return optax.stateless(lambda updates, params: jax.tree.map(transform, updates, values_of(updates)))


def _zero_locked(update: jax.Array, trainable: np.ndarray) -> jax.Array:
  if trainable.all():
    return update
  # A select, not a product: a locked entry is exactly 0 even where its update is not finite.
  return jnp.where(trainable, update, jnp.zeros((), update.dtype))


def _scale(update: jax.Array, scale: np.ndarray) -> jax.Array:
  return update if (scale == 1).all() else update * scale


class LateDecayState(NamedTuple):
  count: jax.Array  # [] int32: the updates applied so far, i.e. the step being taken (skipped steps not counted)


def late_start_weight_decay(weight_decay: float, mask: Callable[[Any], Any], late_starts: Mapping[str, int]
                            ) -> optax.GradientTransformation:
  """AdamW's decoupled weight decay (optax.add_decayed_weights: update + weight_decay * param where `mask` is True),
  except that a parameter under a top-level name of `late_starts` ({name: first step it trains}) is not decayed
  before that step. Such a group (SigLIP 2's SILC and TIPS heads) has no gradient until its start, so plain decay
  would shrink it by exp(-lr * weight_decay * steps) with nothing pulling back: at siglip2_webli's length, to 0."""
  def init(params):
    del params
    return LateDecayState(jnp.zeros((), jnp.int32))

  def update(updates, state, params):
    decayed = mask(params)

    def decay(path, u, p, on):
      if not on:
        return u
      start = late_starts.get(groups.path_names(path)[0]) if path else None
      if start is None:
        return u + weight_decay * p  # optax's own expression, so the other groups' updates are bit for bit its own
      return jnp.where(state.count >= start, u + weight_decay * p, u)
    updates = jax.tree_util.tree_map_with_path(decay, updates, params, decayed)
    return updates, LateDecayState(optax.safe_increment(state.count))
  return optax.GradientTransformation(init, update)


def adamw(optim: ml_collections.ConfigDict, total_steps: int, late_starts: Mapping[str, int] | None = None
          ) -> optax.GradientTransformation:
  """optax.adamw under the schedule with `weight_decay_mask`; with `late_starts`, the same chain with the decay held
  off the late groups until their start (`late_start_weight_decay`), whose state has a step count of its own."""
  schedule = learning_rate_schedule(optim, total_steps)
  if not late_starts:
    return optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps, weight_decay=optim.weight_decay,
                       mask=weight_decay_mask)
  return optax.chain(optax.scale_by_adam(b1=optim.b1, b2=optim.b2, eps=optim.eps),
                     late_start_weight_decay(optim.weight_decay, weight_decay_mask, dict(late_starts)),
                     optax.scale_by_learning_rate(schedule))


def make_optimizer(optim: ml_collections.ConfigDict, total_steps: int, late_starts: Mapping[str, int] | None = None
                   ) -> optax.GradientTransformation:
  """Global-norm clipping (if `grad_clip_norm` > 0), then AdamW under the schedule, with the weight-decay mask.

  Late groups (`late_starts`, {top-level parameter name: first step it trains}: `Objective.late_starts()`, SigLIP 2's
  self-distillation heads): not decayed before their start (`late_start_weight_decay`), so that they start where
  they were initialised.

  Locked towers (`lock_image` / `lock_text`): a leaf locked whole is labelled for `optax.set_to_zero` through
  `optax.multi_transform`, so it gets a zero update and no Adam moments (its entries in the state are optax's
  empty `MaskedNode`s). A stacked leaf of the scanned layout whose blocks are partly locked stays with AdamW, moments
  allocated for all its blocks: its locked rows are zeroed in the gradient (so their moments stay 0) and again in
  the update (AdamW's decoupled weight decay would move them otherwise). Gradients of locked parameters are zeroed
  before clipping, so they do not count in the global norm (in open_clip they have no gradient at all).

  Layer decay (`image_layer_decay` / `text_layer_decay` < 1): AdamW's update of every parameter, weight-decay term
  included, is multiplied by its multiplier (`layer_decay_scales`), as a per-group lr scales both in timm's AdamW.

  With none of these, the chain and its state are what they were before these options existed (checkpoints resume).
  The labels, masks and multipliers are read from the tree the optimizer is given (tower depths from its blocks:
  `groups.num_blocks`), so the optimizer needs no model config."""
  locking = optim.lock_image or optim.lock_text
  decaying = optim.image_layer_decay != 1.0 or optim.text_layer_decay != 1.0
  masks = lambda tree: trainable_masks(tree, optim)  # noqa: E731
  chain = [_per_leaf(_zero_locked, masks)] if locking else []
  if optim.grad_clip_norm > 0:
    chain.append(optax.clip_by_global_norm(optim.grad_clip_norm))
  update = adamw(optim, total_steps, late_starts)
  if locking:
    labels = lambda params: jax.tree.map(lambda m: 'train' if m.any() else 'locked', masks(params))  # noqa: E731
    update = optax.multi_transform({'train': update, 'locked': optax.set_to_zero()}, labels)
  chain.append(update)
  if decaying:
    chain.append(_per_leaf(_scale, lambda tree: layer_decay_scales(tree, optim)))
  if locking:
    chain.append(_per_leaf(_zero_locked, masks))
  return optax.chain(*chain)


def clamp_logit_scales(params: dict, max_log_scale: float | None = MAX_LOG_LOGIT_SCALE) -> dict:
  """Clip every parameter named `*logit_scale` (stored as a log) to [0, max_log_scale]; None clips nothing (the
  objective's `max_log_logit_scale`: the sigmoid loss has no bound)."""
  if max_log_scale is None:
    return params
  def clamp(path, x):
    name = getattr(path[-1], 'key', '')
    return jnp.clip(x, 0.0, max_log_scale) if str(name).endswith('logit_scale') else x
  return jax.tree_util.tree_map_with_path(clamp, params)
