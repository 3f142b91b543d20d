"""An exponential moving average (EMA) of the parameters, for evaluation (`config.ema.decay`; docs/usage.md).

It starts as a copy of the initial parameters and, after each optimizer step (once per step, whatever the
micro-batching), moves towards the parameters that step wrote: ema <- decay * ema + (1 - decay) * params, in
float32, for every parameter (locked ones too: they do not move). It lives in the train state
(`state.EmaTrainState`), has the parameters' tree, layout and shardings, and is checkpointed with them. The loop and
`python -m vlp_jax.evaluate` evaluate it beside the parameters as `eval/<set>/ema_*`. It never feeds back into
training; COSMOS's EMA teacher, which does, is the objective's own (objectives/cosmos.py).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from vlp_jax.objectives.base import ema_update

PREFIX = 'ema_'  # of the EMA's eval metrics, beside the objective's variants (`Objective.eval_variants`)


def init(params: Any) -> Any:
  """The EMA before the first step: a float32 copy of `params` (host numpy or jax arrays, as given)."""
  return jax.tree.map(lambda p: p.astype(jnp.float32), params)


def update(ema: Any, params: Any, decay: float) -> Any:
  """ema <- decay * ema + (1 - decay) * params, leaf by leaf in float32; `params` has `ema`'s tree."""
  return ema_update(ema, init(params), decay)


def eval_variants(objective, params: dict, model_state: dict, ema: dict | None = None) -> dict[str, dict]:
  """The tower variables to evaluate, by metric-name prefix: the objective's (`Objective.eval_variants`: the trained
  model under '', a teacher under its prefix) and, given an EMA of the parameters, the objective's trained-model
  variant built from the EMA under 'ema_' (with the model state's BatchNorm statistics, which the EMA does not
  average)."""
  variants = objective.eval_variants(params, model_state)
  if ema is not None:
    variants[PREFIX] = objective.eval_variants(ema, model_state)['']
  return variants
