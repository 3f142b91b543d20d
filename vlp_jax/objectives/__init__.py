"""Objectives by name. An objective is two pure functions, `features()` and `loss()` (see `base.Objective`).

Adding a method means adding a module here that defines a subclass decorated with `@OBJECTIVES.register('name')`
(or a Term decorated with `@TERMS.register('name')`, which composes with every objective); the registries import
every module of this package the first time they are read.
"""
from __future__ import annotations

import ml_collections

from vlp_jax.objectives.base import OBJECTIVES, TERMS, Composite, Objective, Term, with_defaults


def build(config: ml_collections.ConfigDict, model) -> Objective:
  """The objective named by `config.objective.name`, bound to `model`, plus the terms in `config.objective.terms`.
  The objective learns what it needs of the rest of the run config through `Objective.bind`."""
  objective_cls = OBJECTIVES.get(config.objective.name)
  objective = objective_cls(model, objective_cls.options(config.objective))
  objective.bind(config)
  terms = [TERMS.get(name)(with_defaults(TERMS.get(name).default_config(), config.objective.get(name, {})), config)
           for name in config.objective.terms]
  return Composite(objective, terms) if terms else objective


__all__ = ['OBJECTIVES', 'TERMS', 'Composite', 'Objective', 'Term', 'build', 'with_defaults']
