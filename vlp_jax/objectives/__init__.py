"""Objectives by name. An objective is two pure functions, `features()` and `loss()` (see `base.Objective`).

Adding a method means adding a module here that defines a subclass decorated with `@register('name')`, and listing
the module in `_MODULES`.
"""
from __future__ import annotations

import importlib

import ml_collections

from vlp_jax.objectives.base import Objective, register, registry

_MODULES = ('clip',)


def _load_all() -> None:
  for module in _MODULES:
    importlib.import_module(f'vlp_jax.objectives.{module}')


def names() -> list[str]:
  _load_all()
  return sorted(registry())


def get(name: str) -> type[Objective]:
  _load_all()
  if name not in registry():
    raise ValueError(f"config.objective.name='{name}' is not a registered objective; valid choices: {names()}")
  return registry()[name]


def build(config: ml_collections.ConfigDict, model) -> Objective:
  """The objective named by `config.objective.name`, bound to `model`."""
  return get(config.objective.name)(model, config.objective)


__all__ = ['Objective', 'build', 'get', 'names', 'register']
