"""Staged resolution in one run (config.data.resolution_stages; data/image/resolution_stages.py has the schedule): each
stage trains the model at its image size, with the position embedding at that size's grid. At a switch the whole train
state is carried over by the surgery that fine-tuning at another shape uses (models/resize.py):

  - the parameters' position embedding, the EMA of the weights' and the teacher's copies of it (any leaf at a path
    ending in visual/positional_embedding), resized bicubically, as the tower itself resizes it for other inputs;
  - Adam's first moment (`mu`) the same way: it is a running mean of gradients, a tensor of the parameter's space, so
    it moves with the parameter's grid;
  - Adam's second moment (`nu`) by linear interpolation, whose weights are never negative: it is a running mean of
    squared gradients and divides the update, so it must stay positive (bicubic's negative lobes can take it below
    zero, and a zero next to a non-zero `mu` makes an update of mu / eps). Kept rather than reset: the next updates
    keep Adam's per-parameter scale instead of starting a fresh, bias-uncorrected estimate mid-run.

Everything else (the step count, the other parameters and moments, the data position) is unchanged, so a run resumed
on either side of a switch continues bit for bit (tests/integration/test_resolution_stages.py).
"""
from __future__ import annotations

from typing import Any

import jax
import ml_collections

from vlp_jax.data.image import resolution_stages as resolution
from vlp_jax.models.resize import grid_of, resize_position_embedding
from vlp_jax.models.towers import vision_tower, with_tower_defaults

POSITION_PATH = ('visual', 'positional_embedding')


def stage_starts(config: ml_collections.ConfigDict) -> tuple[tuple[int, int], ...]:
  """((first batch index, image size), ...) of the run; () without stages (or without config.data: a stand-in)."""
  data = config.get('data', None)
  stages = data.get('resolution_stages', ()) if data is not None else ()
  return resolution.stage_starts(stages, config.total_steps) if stages else ()


def size_at(config: ml_collections.ConfigDict, index: int) -> int:
  """The image size of batch `index` (0-based: the batch of train step index + 1)."""
  return resolution.size_at(stage_starts(config), index, config.model.vision.image_size)


def switches_at(config: ml_collections.ConfigDict, index: int) -> bool:
  """Whether batch `index` is the first of a stage after the first (the state is resized before it)."""
  return bool(stage_starts(config)) and index > 0 and size_at(config, index) != size_at(config, index - 1)


def config_at(config: ml_collections.ConfigDict, index: int) -> ml_collections.ConfigDict:
  """The run's config with config.model.vision.image_size at the size of batch `index`: what the model, the
  objective and the compiled step of that stage are built from (`config` itself when the size is the model's)."""
  if not stage_starts(config):
    return config
  size = size_at(config, index)
  if size == config.model.vision.image_size:
    return config
  staged = ml_collections.ConfigDict(config.to_dict())
  staged.model.vision.image_size = size
  return staged


def state_config(config: ml_collections.ConfigDict, step: int) -> ml_collections.ConfigDict:
  """The stage config of a state after `step` updates: that of its last batch (index step - 1), or of the first for
  a new state. The switch to the next batch's stage happens when that batch is dispatched, so a checkpoint at a
  switch holds the earlier stage's shapes."""
  return config_at(config, max(step - 1, 0))


def _keys(path: tuple) -> tuple[str, ...]:
  """A jax key path as strings: dict keys, attribute names (optax's `mu`, `nu`) and sequence indices."""
  return tuple(str(getattr(k, 'key', getattr(k, 'name', getattr(k, 'idx', k)))) for k in path)


def resize_state(state: Any, old_vision: ml_collections.ConfigDict, new_vision: ml_collections.ConfigDict
                 ) -> tuple[Any, int]:
  """A train state (on the devices, or numpy) at `old_vision`'s image size -> (the same at `new_vision`'s, the number of leaves
  resized): every leaf at a path ending in visual/positional_embedding resized to the new grid, bicubically, or
  linearly under Adam's `nu` (the module docstring says why)."""
  old, new = with_tower_defaults(old_vision), with_tower_defaults(new_vision)
  prefix = vision_tower(new).position_prefix
  if prefix is None:
    raise ValueError(f"config.model.vision.type={new.type!r} defines no resize of its position embedding")
  old_grid, new_grid = grid_of(old), grid_of(new)
  resized = 0

  def resize(path, leaf):
    nonlocal resized
    keys = _keys(path)
    if keys[-len(POSITION_PATH):] != POSITION_PATH:
      return leaf
    resized += 1
    method = 'linear' if 'nu' in keys else 'bicubic'
    return resize_position_embedding(leaf, old_grid, new_grid, prefix, method)  # on the devices for a jax array

  return jax.tree_util.tree_map_with_path(resize, state), resized
