"""The objective interface every method implements.

`features(params, batch, rng, train)` maps a (micro-)batch to per-sample outputs: row i depends only on example i, so
a batch can be embedded in pieces. `loss(features, params, step)` is batch-level and pure: logit and affinity
matrices live here. The train step (and decoupled gradient accumulation) only ever calls these two.
"""
from __future__ import annotations

from typing import Any

import jax
import ml_collections

from vlp_jax.models import init_params

_REGISTRY: dict[str, type['Objective']] = {}


def register(name: str):
  """Class decorator: make an Objective subclass available as `config.objective.name = name`."""
  def wrap(cls):
    if name in _REGISTRY:
      raise ValueError(f"objective '{name}' is registered twice")
    cls.name = name
    _REGISTRY[name] = cls
    return cls
  return wrap


def registry() -> dict[str, type['Objective']]:
  return _REGISTRY


class Objective:
  """Base class. Subclasses set `name` (via `register`) and may extend `default_config`."""
  name: str = ''

  def __init__(self, model, config: ml_collections.ConfigDict):
    self.model = model
    self.config = config

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    """Options this objective accepts under `config.objective`, with their defaults (used to validate configs)."""
    return {'name': cls.name}

  def init_params(self, rng: jax.Array) -> dict:
    """All trainable parameters: the two towers plus any heads the objective adds."""
    return init_params(self.model, rng)

  def features(self, params: dict, batch: dict[str, jax.Array], rng: jax.Array, train: bool = True) -> Any:
    raise NotImplementedError

  def loss(self, features: Any, params: dict, step: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    raise NotImplementedError
