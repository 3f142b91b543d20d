"""The train state: a plain pytree (step, params, optimizer state), so orbax saves and restores it as is."""
from __future__ import annotations

from typing import Any

import flax.struct
import jax


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # [] int32
  params: Any
  opt_state: Any


def create_train_state(objective, tx, rng: jax.Array) -> TrainState:
  params = objective.init_params(rng)
  return TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=params, opt_state=tx.init(params))
