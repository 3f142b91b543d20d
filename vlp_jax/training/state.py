"""The train state: a plain pytree (step, params, model state, optimizer state, and with config.ema.decay an EMA of
the params), so orbax saves and restores it."""
from __future__ import annotations

from typing import Any

import flax.struct
import jax

from vlp_jax.training import ema as ema_lib


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # [] int32
  params: Any
  model_state: Any  # non-trained collections, e.g. {'batch_stats': ...}; {} for ViT models
  opt_state: Any


@flax.struct.dataclass
class EmaTrainState(TrainState):
  """A train state with an EMA of its parameters (training/ema.py). A subclass rather than a field of TrainState
  left None when off: orbax records a None field, so a run without the EMA would write other checkpoints than
  before and could no longer resume the earlier ones."""
  ema: Any  # float32, the tree, layout and shardings of `params`


def with_ema(state: TrainState, ema_decay: float) -> TrainState:
  """`state` with an EMA starting at its parameters when `ema_decay` > 0 (config.ema.decay); else `state` itself."""
  if not ema_decay:
    return state
  return EmaTrainState(step=state.step, params=state.params, model_state=state.model_state,
                       opt_state=state.opt_state, ema=ema_lib.init(state.params))


def create_train_state(objective, tx, rng: jax.Array, ema_decay: float = 0.0) -> TrainState:
  params, model_state = objective.init_variables(rng)
  return with_ema(TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=params, model_state=model_state,
                             opt_state=tx.init(params)), ema_decay)
