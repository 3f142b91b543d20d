"""Evaluation: `Encoder` (the one door to the model), the evaluators registered in `EVALUATORS` (base.py; one module
each: zeroshot, retrieval, affinity, segmentation, compositional, linear_probe), `run_evaluations`, which names
their results `eval/<dataset>/<metric>`, and `evaluate_variants`, which runs them for each set of variables to
evaluate (the trained model, a teacher, an EMA of the weights)."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterable

from vlp_jax.evalsets.prompts import TEMPLATE_SETS
from vlp_jax.evaluation.base import EVALUATORS, Evaluator, evaluator, has_field
from vlp_jax.evaluation.encoder import Encoder


def with_templates(eval_set, choice: str = 'dataset'):
  """The eval set whose zero-shot prompts are `config.eval.templates`: its own for 'dataset', else the named set of
  evalsets/prompts.py (sets without class names keep none)."""
  if choice == 'dataset' or not has_field(eval_set, 'class_names'):
    return eval_set
  return dataclasses.replace(eval_set, templates=TEMPLATE_SETS.get(choice))


def run_evaluations(encoder: Encoder, eval_sets: list, tasks: tuple[str, ...], prefix: str = '',
                    templates: str = 'dataset') -> dict[str, float]:
  """Every task that applies on every eval set, named `eval/<dataset>/<prefix><metric>`; image embeddings are
  computed once per set. A task applies where the set has what it needs (`Evaluator.needs`): a classification set
  has no retrieval metrics, COCO no zero-shot accuracy. templates: `config.eval.templates`."""
  results = {}
  for eval_set in eval_sets:
    eval_set = with_templates(eval_set, templates)
    image_emb = encoder.images(eval_set.images)
    for task in tasks:
      task_evaluator = EVALUATORS.get(task)
      if not task_evaluator.applies(eval_set):
        continue
      for metric, value in task_evaluator.fn(encoder, eval_set, image_emb).items():
        results[f'eval/{eval_set.name}/{prefix}{metric}'] = value
  return results


def evaluate_variants(encoder: Encoder, variants: Iterable[tuple[str, dict]], eval_sets: list, tasks: tuple[str, ...],
                      templates: str = 'dataset', after_variant: Callable[[str, float], None] | None = None
                      ) -> dict[str, float]:
  """`run_evaluations` for each (prefix, variables) of `variants` in turn, the encoder given that variant's variables:
  {'eval/<dataset>/<prefix><metric>': value} over every variant. The training loop and `python -m vlp_jax.evaluate`
  both evaluate this way, so that their numbers agree.

  variants: e.g. `training.ema.eval_variants(...).items()`; may be lazy, so that each variant is placed on the
  devices only when its turn comes. after_variant(prefix, seconds its evaluation took): called while the encoder
  still holds that variant's variables (to draw its plots, say).
  """
  results = {}
  for prefix, variables in variants:
    encoder.variables = variables
    began = time.perf_counter()
    results.update(run_evaluations(encoder, eval_sets, tasks, prefix, templates))
    if after_variant is not None:
      after_variant(prefix, time.perf_counter() - began)
  return results


__all__ = ['EVALUATORS', 'Encoder', 'Evaluator', 'evaluate_variants', 'evaluator', 'run_evaluations', 'with_templates']
