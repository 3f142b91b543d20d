"""The objective interface every method implements.

`features(params, model_state, batch, rng, train)` maps a (micro-)batch to per-sample outputs (row i depends only on
example i, so a batch can be embedded in pieces) and returns the updated model state (BatchNorm statistics; an empty
dict for ViT models). `loss(features, params, step)` is batch-level and pure: logit and affinity matrices live here.
The train step (and decoupled gradient accumulation) only ever calls these two.
"""
from __future__ import annotations

from typing import Any

import jax
import ml_collections

from vlp_jax.models import init_variables

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

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    """(params, model_state): the trainable parameters of the two towers plus any heads the objective adds, and the
    non-trained model state (BatchNorm statistics)."""
    return init_variables(self.model, rng)

  def encode_image(self, params: dict, model_state: dict, images: jax.Array, train: bool
                   ) -> tuple[dict[str, jax.Array], dict]:
    """The image tower; returns its outputs and the model state, updated when training with BatchNorm."""
    variables = {'params': params, **model_state}
    if train and model_state:
      out, updates = self.model.apply(variables, images, True, method=self.model.encode_image,
                                      mutable=list(model_state))
      return out, {**model_state, **updates}
    return self.model.apply(variables, images, train, method=self.model.encode_image), model_state

  def encode_text(self, params: dict, tokens: jax.Array) -> dict[str, jax.Array]:
    return self.model.apply({'params': params}, tokens, method=self.model.encode_text)

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
               train: bool = True) -> tuple[Any, dict]:
    raise NotImplementedError

  def loss(self, features: Any, params: dict, step: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    raise NotImplementedError
