"""The train state: a plain pytree (step, params, model state, optimizer state), so orbax saves and restores it."""
from __future__ import annotations

from typing import Any

import flax.struct
import jax


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # [] int32
  params: Any
  model_state: Any  # non-trained collections, e.g. {'batch_stats': ...}; {} for ViT models
  opt_state: Any


def create_train_state(objective, tx, rng: jax.Array) -> TrainState:
  params, model_state = objective.init_variables(rng)
  return TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=params, model_state=model_state,
                    opt_state=tx.init(params))
