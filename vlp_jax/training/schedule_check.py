"""A whole run's optimizer schedule in seconds: the run's own optimizer chain (`optim.make_optimizer`, built from the
config as the train loop builds it) over all of `config.total_steps`, in one compiled loop (run in a few segments
that end where something is read: `simulate_schedule`), on a small tree that has the run's parameter groups
(towers, locked or not; heads that start late; logit scale and bias; the decoder), so that what only shows at a
run's real length (a group decayed to nothing before it trains, a switch or ramp in the wrong place, a logit scale
clipped) shows before a run is launched (tests/unit/training/test_schedule_simulation.py runs it on every shipped
config). It lives in the package, not in the tests, so that a user can check a config of their own the same way.

The small tree. The real parameter tree is read abstractly (`jax.eval_shape` of the objective's initialisation: no
memory, any scale), then one leaf is kept per class of leaves the optimizer treats alike (tower, weight decay or
not, the group outside the towers; with locked towers or layer decay also the layer position), each shrunk to 2
entries per axis (a stacked leaf keeps its layer axis), named by its real path: the chain's masks, labels and
multipliers read the same rules from it as from the real tree.

The gradients. Each group trains from its `Objective.late_starts()` step (0 for the rest): before it, its gradient
is exactly 0 (as in a real run); from it, a small deterministic oscillation (`pseudo_gradient`). The logit scale's
gradient also pulls it back towards its initial value, as a loss at its optimum would. After each update the train
step's clamp (`optim.clamp_logit_scales` with the objective's bound) is applied, as in training/step.py.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vlp_jax import models, objectives
from vlp_jax.data.text.tokenizer_factory import CLIP_BPE
from vlp_jax.models import groups
from vlp_jax.parallel import stacked_axes
from vlp_jax.training import optim

GRADIENT_SCALE = 1e-3  # of the pseudo-gradients: small, so that weight decay is what moves an idle group
# Released logit scales an imported model starts at: OpenAI CLIP's (at CLIP's bound); SigLIP L/16-384's in
# big_vision's demo (the sigmoid loss has no bound).
IMPORTED_SOFTMAX_SCALE, IMPORTED_SIGMOID_SCALE = 100.0, 118.0


def _shapes_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` as far as the parameter tree's structure goes, without reading a tokenizer file or the data: a
  decoder's vocabulary (siglip2) from CLIP's shipped tokenizer. Its output size changes; its groups do not."""
  config = ml_collections.ConfigDict(config.to_dict())
  if config.objective.get('decoder_weight', 0):
    config.model.text.update(tokenizer=CLIP_BPE, tokenizer_path='')
    config.objective.decoder_vocabulary = 'tokenizer'
  return config


def parameter_shapes(config: ml_collections.ConfigDict) -> tuple[Any, dict]:
  """(the objective, its parameter tree of jax.ShapeDtypeStruct), at the config's real shapes, computing nothing."""
  shaped = _shapes_config(config)
  objective = objectives.build(shaped, models.build_model(shaped.model))
  base = getattr(objective, 'base', objective)  # terms (SaCo) add model state only
  params, _ = jax.eval_shape(base.init_variables, jax.random.key(0))
  return objective, params


def _leaf_class(path: tuple, leaf: Any, depths: dict[str, int | None] | None) -> tuple:
  """What the optimizer reads of a leaf: its tower (or top-level name outside them), whether it is decayed, whether
  it is a logit scale or bias and, with `depths` (the towers' blocks, when positions matter), its layer position
  and lock group (models/groups.py)."""
  names = groups.path_names(path)
  tower = groups.tower_of(path)
  decayed = len(leaf.shape) - stacked_axes(path) >= 2
  key = (tower or names[0], decayed, names[-1] == 'logit_scale', names[-1] == 'logit_bias')
  if depths is None or tower is None:
    return key
  depth = depths[tower]
  if depth is None:  # a tower without blocks (ResNet) locks whole
    return key
  return key + (tuple(np.ravel(groups.layer_ids(path, depth))), tuple(np.ravel(groups.lock_groups(path, depth))))


def small_tree(params: dict, optim_config: ml_collections.ConfigDict) -> dict:
  """One float32 leaf per class of `params` (module docstring), at its real path: 2 entries per axis, a stacked
  leaf's layer axis kept; matrices start at 0.02, vectors and scalars at 1 (the caller sets the logit scale)."""
  positions = bool(optim_config.lock_image or optim_config.lock_text or optim_config.image_layer_decay != 1.0
                   or optim_config.text_layer_decay != 1.0)
  depths = {tower: groups.num_blocks(params, tower) for tower in groups.TOWERS} if positions else None
  seen, kept = set(), []
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    cls = _leaf_class(path, leaf, depths)
    if cls in seen:
      continue
    seen.add(cls)
    stacked = stacked_axes(path)
    shape = tuple(leaf.shape[:stacked]) + (2,) * (len(leaf.shape) - stacked)
    value = np.full(shape, 0.02 if len(shape) - stacked >= 2 else 1.0, np.float32)
    kept.append((groups.path_names(path), value))
  tree: dict = {}
  for names, value in kept:
    node = tree
    for name in names[:-1]:
      node = node.setdefault(name, {})
    node[names[-1]] = value
  return tree


def pseudo_gradient(step: jax.Array, leaf: jax.Array, index: int) -> jax.Array:
  """A small zero-mean oscillation of the leaf's shape, different per entry and per leaf: sin of the step at
  incommensurate frequencies. Cheap inside a scan of a million steps, unlike a random draw."""
  phases = jnp.arange(leaf.size, dtype=jnp.float32).reshape(leaf.shape) * 0.7071 + index * 1.3
  return GRADIENT_SCALE * jnp.sin(step.astype(jnp.float32) * 0.618 + phases)


@dataclasses.dataclass
class ScheduleSimulation:
  """What a simulated run did, per leaf of the small tree (`names`, '/'-joined paths)."""
  names: list[str]
  start: np.ndarray  # [n] the step each leaf's group starts training
  initial_norm: np.ndarray  # [n]
  norm_at_start: np.ndarray  # [n] the leaf's norm when its group starts (after `start` updates)
  moved_before_start: np.ndarray  # [n] bool: an update before its group's start changed the leaf
  moved_at_start: np.ndarray  # [n] bool: the update of its start step changed it
  final_norm: np.ndarray  # [n]
  finite: bool  # every parameter finite at every step
  logit_scale: dict[str, float]  # 'initial', 'after_first', 'min', 'max' of exp(log scale); empty without one
  max_log_logit_scale: float | None  # the objective's bound
  late_starts: dict[str, int]
  locked: np.ndarray  # [n] bool: the leaf is in a locked group (it must not move)
  total_steps: int


def simulate_schedule(config: ml_collections.ConfigDict, initial_log_scale: float | None = None,
                      steps: int | None = None, trains_from: Mapping[str, int] | None = None) -> ScheduleSimulation:
  """Runs the config's optimizer over `steps` (default config.total_steps) on its small tree (module docstring),
  the logit scale starting at `initial_log_scale` (default: the config's, or for a run that starts from a
  checkpoint, `config.init.checkpoint`, a released model's: `imported_log_scale`). `trains_from` ({top-level name:
  first step with a gradient}) says when groups start training (default: the objective's `late_starts()`, which
  the optimizer is built with); a check can pass the paper's to test the objective's against it."""
  objective, shapes = parameter_shapes(config)
  late = objective.late_starts()
  trains_from = late if trains_from is None else dict(trains_from)
  steps = int(config.total_steps if steps is None else steps)
  tree = small_tree(shapes, config.optim)
  if 'logit_scale' in tree:
    if initial_log_scale is None:
      initial_log_scale = (imported_log_scale(objective) if config.init.get('checkpoint', '')
                           or config.init.get('require_checkpoint', False) else config.model.init_logit_scale)
    tree['logit_scale'] = np.float32(initial_log_scale)
  tx = optim.make_optimizer(config.optim, config.total_steps, late)
  flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
  names = ['/'.join(groups.path_names(path)) for path, _ in flat]
  starts = np.array([trains_from.get(n.split('/')[0], 0) for n in names], np.int32)
  masks = optim.trainable_masks(tree, config.optim) if config.optim.lock_image or config.optim.lock_text else None
  # Leaves locked whole (a stacked leaf with some blocks unlocked moves in those rows).
  locked = (np.array([not np.any(m) for m in jax.tree.leaves(masks)]) if masks is not None
            else np.zeros(len(names), bool))
  scale_index = names.index('logit_scale') if 'logit_scale' in names else None
  bound = objective.max_log_logit_scale
  params0 = [jnp.asarray(leaf) for _, leaf in flat]

  def gradients(step, params):
    out = []
    for i, p in enumerate(params):
      g = pseudo_gradient(step, p, i)
      if i == scale_index:  # the loss's optimum at the initial scale
        g = g + (p - params0[i])
      out.append(jnp.where(step >= starts[i], g, jnp.zeros_like(g)))
    return out

  norms = lambda params: np.array([np.linalg.norm(np.ravel(p)) for p in params])  # noqa: E731

  def body(step, carry):
    params, opt_state, finite, low, high = carry
    tree_params = jax.tree_util.tree_unflatten(treedef, params)
    grads = jax.tree_util.tree_unflatten(treedef, gradients(step, params))
    updates, opt_state = tx.update(grads, opt_state, tree_params)
    new = jax.tree.leaves(optim.clamp_logit_scales(optax.apply_updates(tree_params, updates), bound))
    finite = finite & jnp.all(jnp.stack([jnp.all(jnp.isfinite(n)) for n in new]))
    if scale_index is not None:
      low, high = jnp.minimum(low, new[scale_index]), jnp.maximum(high, new[scale_index])
    return new, opt_state, finite, low, high

  # Steps lo .. hi - 1 as one loop (traced bounds: one program for every segment).
  advance = jax.jit(lambda carry, lo, hi: jax.lax.fori_loop(lo, hi, body, carry))
  # The run in segments that end where something is read: after the first step, at each late start and one step
  # after it, at the end. Between them the loop carries only the parameters, the optimizer state and the flags.
  bounds = sorted({0, min(1, steps), steps} | {int(b) for s in set(starts.tolist()) for b in (s, s + 1) if b < steps})
  carry = (params0, tx.init(jax.tree_util.tree_unflatten(treedef, params0)), jnp.bool_(True), jnp.float32(np.inf),
           jnp.float32(-np.inf))
  at = {0: jax.device_get(params0)}
  for lo, hi in zip(bounds[:-1], bounds[1:]):
    carry = advance(carry, jnp.int32(lo), jnp.int32(hi))
    at[hi] = jax.device_get(carry[0])
  params, _, finite, low, high = jax.device_get(carry)
  before = lambda i, b: at[min(int(b), steps)][i]  # noqa: E731  (leaf i after b updates)
  unchanged = lambda x, y: bool(np.array_equal(x, y))  # noqa: E731
  n = len(params0)
  at_start = np.array([np.linalg.norm(np.ravel(before(i, starts[i]))) for i in range(n)])
  moved_before = np.array([not unchanged(before(i, starts[i]), at[0][i]) for i in range(n)])
  moved_at = np.array([starts[i] < steps and not unchanged(before(i, starts[i] + 1), before(i, starts[i]))
                       for i in range(n)])
  logit = ({} if scale_index is None else
           {'initial': math.exp(float(params0[scale_index])), 'after_first': math.exp(float(at[min(1, steps)][
               scale_index])), 'min': math.exp(float(low)), 'max': math.exp(float(high))})
  return ScheduleSimulation(names, starts, norms(at[0]), at_start, moved_before, moved_at, norms(params), bool(finite),
                            logit, bound, late, locked, steps)


def imported_log_scale(objective) -> float:
  """The log logit scale a released model of the objective's family sits at (IMPORTED_*_SCALE)."""
  sigmoid = objective.max_log_logit_scale is None
  return math.log(IMPORTED_SIGMOID_SCALE if sigmoid else IMPORTED_SOFTMAX_SCALE)
