"""Objectives by name. An objective is two pure functions, `features()` and `loss()` (see `base.Objective`).

Adding a method means adding a module here that defines a subclass decorated with `@register('name')` (or a Term
decorated with `@register_term('name')`, which composes with every objective); modules are discovered by name.
"""
from __future__ import annotations

import importlib
import pkgutil

import ml_collections

from vlp_jax.objectives.base import (Composite, Objective, Term, register, register_term, registry, term_registry,
                                    with_defaults)

def _load_all() -> None:
  for module in pkgutil.iter_modules(__path__):
    if module.name != 'base':
      importlib.import_module(f'{__name__}.{module.name}')


def names() -> list[str]:
  _load_all()
  return sorted(registry())


def get(name: str) -> type[Objective]:
  _load_all()
  if name not in registry():
    raise ValueError(f"config.objective.name='{name}' is not a registered objective; valid choices: {names()}")
  return registry()[name]


def get_term(name: str) -> type[Term]:
  _load_all()
  if name not in term_registry():
    raise ValueError(f"config.objective.terms has '{name}', which is not a registered term; valid choices: "
                     f'{sorted(term_registry())}')
  return term_registry()[name]


def build(config: ml_collections.ConfigDict, model) -> Objective:
  """The objective named by `config.objective.name`, bound to `model`, plus the terms in `config.objective.terms`."""
  objective_cls = get(config.objective.name)
  objective = objective_cls(model, objective_cls.options(config.objective))
  terms = [get_term(name)(with_defaults(get_term(name).default_config(), config.objective.get(name, {})), config)
           for name in config.objective.terms]
  return Composite(objective, terms) if terms else objective


__all__ = ['Objective', 'Term', 'build', 'get', 'get_term', 'names', 'register', 'register_term']
