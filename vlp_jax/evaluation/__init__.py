"""Evaluation: `Encoder` (the one door to the model), the evaluators registered in `EVALUATORS` (base.py; one module
each: zeroshot, retrieval, affinity, segmentation, compositional, linear_probe, referring, captioning),
`run_evaluations`, which names their results `eval/<dataset>/<metric>`, `evaluate_variants`, which runs them for
each set of variables to evaluate (the trained model, a teacher, an EMA of the weights), and `report_evaluated`,
which says once, in one line, which evaluators run on which set (and, at INFO on this package's logger, why the others
do not apply: the commands' --verbose)."""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Iterable

from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, ImagePreprocessing
from vlp_jax.evalsets.prompts import TEMPLATE_SETS
from vlp_jax.evaluation import naflex_budgets
from vlp_jax.evaluation.base import EVALUATORS, Evaluator, evaluator, has_field
from vlp_jax.evaluation.encoder import Encoder

LOG = logging.getLogger(__name__)


def with_templates(eval_set, choice: str = 'dataset'):
  """The eval set whose zero-shot prompts are `config.eval.templates`: its own for 'dataset', else the named set of
  evalsets/prompts.py (sets without class names keep none)."""
  if choice == 'dataset' or not has_field(eval_set, 'class_names'):
    return eval_set
  return dataclasses.replace(eval_set, templates=TEMPLATE_SETS.get(choice))


def missing_fields(task_evaluator: Evaluator, eval_set) -> str:
  """What `eval_set` lacks for the evaluator, per alternative of its needs: 'captions', 'canonical_captions and
  hard_negatives, nor winoground_captions'; '' when it applies."""
  if task_evaluator.applies(eval_set):
    return ''
  missing = [[f for f in fields if not has_field(eval_set, f)] for fields in task_evaluator.needs]
  return ', nor '.join(' and '.join(fields) for fields in missing)


def skipped_tasks(eval_sets: list, tasks: tuple[str, ...]) -> list[str]:
  """One line per eval set that some of `tasks` do not apply to, naming them and what the set lacks, e.g.
  'digits: retrieval, affinity skipped (no captions)'; [] when every task applies to every set."""
  lines = []
  for eval_set in eval_sets:
    by_reason: dict[str, list[str]] = {}
    for task in tasks:
      missing = missing_fields(EVALUATORS.get(task), eval_set)
      if missing:
        by_reason.setdefault(missing, []).append(task)
    if by_reason:
      reasons = [f'{", ".join(names)} skipped (no {missing})' for missing, names in by_reason.items()]
      lines.append(f'{eval_set.name}: {"; ".join(reasons)}')
  return lines


def evaluated_line(eval_sets: list, tasks: tuple[str, ...]) -> str:
  """One line naming, for each eval set, the tasks that apply to it, sets with the same tasks together, e.g.
  'Eval sets: synthetic (zeroshot, retrieval); coco, flickr (retrieval)'; '' without eval sets. When a task does
  not apply to some set, the line ends by saying that `skipped_tasks` (the commands' --verbose) gives the reasons."""
  if not eval_sets:
    return ''
  by_tasks: dict[tuple[str, ...], list[str]] = {}
  for eval_set in eval_sets:
    applied = tuple(task for task in tasks if EVALUATORS.get(task).applies(eval_set))
    by_tasks.setdefault(applied, []).append(eval_set.name)
  groups = [f'{", ".join(names)} ({", ".join(applied) or "no task applies"})' for applied, names in by_tasks.items()]
  skipped = any(applied != tuple(tasks) for applied in by_tasks)
  return f'Eval sets: {"; ".join(groups)}' + ('; tasks not listed do not apply (--verbose says why)'
                                              if skipped else '')


def report_evaluated(eval_sets: list, tasks: tuple[str, ...]) -> None:
  """Print `evaluated_line` once, when the eval sets are loaded, rather than skip tasks silently at each evaluation;
  log `skipped_tasks` at INFO (shown by the commands' --verbose)."""
  line = evaluated_line(eval_sets, tasks)
  if line:
    print(line, flush=True)
  for skipped in skipped_tasks(eval_sets, tasks):
    LOG.info('Eval set %s', skipped)


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
                      templates: str = 'dataset', after_variant: Callable[[str, float], None] | None = None,
                      naflex_max_patches: tuple[int, ...] = (),
                      preprocessing: ImagePreprocessing = OPENAI_CLIP_PREPROCESSING) -> dict[str, float]:
  """`run_evaluations` for each (prefix, variables) of `variants` in turn, the encoder given that variant's variables:
  {'eval/<dataset>/<prefix><metric>': value} over every variant. The training loop and `python -m vlp_jax.evaluate`
  both evaluate this way, so that their numbers agree.

  variants: e.g. `training.ema.eval_variants(...).items()`; may be lazy, so that each variant is placed on the
  devices only when its turn comes. after_variant(prefix, seconds its evaluation took): called while the encoder
  still holds that variant's variables (to draw its plots, say).
  naflex_max_patches: `config.eval.naflex_max_patches`; zero-shot and retrieval again at each of these NaFlex patch
  budgets, as eval/<dataset>/<prefix>naflex<budget>_<metric> (evaluation/naflex_budgets.py), from the eval sets' images
  made with `preprocessing` (the model's).
  """
  results = {}
  for prefix, variables in variants:
    encoder.variables = variables
    began = time.perf_counter()
    results.update(run_evaluations(encoder, eval_sets, tasks, prefix, templates))
    if naflex_max_patches:
      for budget, budget_encoder in naflex_budgets.budget_encoders(encoder, tuple(naflex_max_patches),
                                                                   encoder.model.vision.patch_size, preprocessing):
        results.update(run_evaluations(budget_encoder, eval_sets, naflex_budgets.naflex_tasks(tasks),
                                       prefix + budget, templates))
    if after_variant is not None:
      after_variant(prefix, time.perf_counter() - began)
  return results


__all__ = ['EVALUATORS', 'Encoder', 'Evaluator', 'evaluate_variants', 'evaluated_line', 'evaluator', 'missing_fields',
           'report_evaluated', 'run_evaluations', 'skipped_tasks', 'with_templates']
