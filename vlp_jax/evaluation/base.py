"""The evaluator registry. An evaluator is a function (encoder, eval_set, image_emb) -> {metric: value} that declares
which `EvalSet` fields it needs; `config.eval.tasks` names evaluators, and each runs on the eval sets that have what
it needs. Adding one is adding a module here:

  @evaluator('my_task', needs=('captions',))
  def my_task(encoder, eval_set, image_emb): ...
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from vlp_jax.registry import Registry


def has_field(eval_set: Any, field: str) -> bool:
  """Whether an eval set has a field: present, not None and, for a sequence, not empty."""
  value = getattr(eval_set, field, None)
  return value is not None and (not hasattr(value, '__len__') or len(value) > 0)


@dataclasses.dataclass(frozen=True)
class Evaluator:
  """fn: (encoder, eval_set, image_emb [N, d]) -> {metric: value}. needs: alternatives, each a tuple of EvalSet
  fields that must all be there (`has_field`); the evaluator applies when one alternative is met."""
  fn: Callable[..., dict[str, float]]
  needs: tuple[tuple[str, ...], ...]

  def applies(self, eval_set: Any) -> bool:
    return any(all(has_field(eval_set, field) for field in fields) for fields in self.needs)


EVALUATORS: Registry[Evaluator] = Registry('evaluator', 'eval.tasks', package='vlp_jax.evaluation')


def evaluator(name: str, needs: tuple[str, ...], *alternatives: tuple[str, ...]):
  """Decorator: register `fn` as the evaluator `name`, applying to eval sets with every field of `needs` (or of one
  of the `alternatives`)."""
  def wrap(fn):
    EVALUATORS.add(name, Evaluator(fn, (tuple(needs), *map(tuple, alternatives))))
    return fn
  return wrap
