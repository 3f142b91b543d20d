"""Evaluation: `Encoder` (the one door to the model), the evaluators registered in `EVALUATORS` (base.py; one module
each: zeroshot, retrieval, affinity, segmentation, compositional, linear_probe) and `run_evaluations`, which names
their results `eval/<dataset>/<metric>`."""
from __future__ import annotations

import dataclasses

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


__all__ = ['EVALUATORS', 'Encoder', 'Evaluator', 'evaluator', 'run_evaluations', 'with_templates']
