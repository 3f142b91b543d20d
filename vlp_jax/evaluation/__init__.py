"""Evaluators by name. Each takes an `Encoder` and an `EvalSet` and returns {metric: value}; the runner names them
`eval/<dataset>/<metric>`."""
from __future__ import annotations

from typing import Callable

from vlp_jax.evaluation.affinity import affinity_consistency, first_captions
from vlp_jax.evaluation.compositional import compositional_evaluator
from vlp_jax.evaluation.linear_probe import linear_probe_evaluator
from vlp_jax.evaluation.segmentation import segmentation_evaluator
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.evaluation.retrieval import retrieval_chance, retrieval_metrics
from vlp_jax.evaluation.zeroshot import class_embeddings, zeroshot_metrics


def zeroshot(encoder: Encoder, eval_set, image_emb) -> dict[str, float]:
  classes = class_embeddings(encoder.texts, eval_set.class_names, eval_set.templates)
  return zeroshot_metrics(image_emb, classes, eval_set.labels)


def retrieval(encoder: Encoder, eval_set, image_emb) -> dict[str, float]:
  metrics = retrieval_metrics(image_emb, encoder.texts(eval_set.captions), eval_set.caption_image)
  metrics['i2t_r1_chance'], metrics['t2i_r1_chance'] = retrieval_chance(len(image_emb), len(eval_set.captions), 1)
  return metrics


def affinity(encoder: Encoder, eval_set, image_emb) -> dict[str, float]:
  """SaCo's affinity consistency between each image and its first caption."""
  images, first = first_captions(eval_set.caption_image)
  text_emb = encoder.texts([eval_set.captions[i] for i in first])
  return {'affinity_consistency': affinity_consistency(image_emb[images], text_emb)}


EVALUATORS: dict[str, Callable] = {'zeroshot': zeroshot, 'retrieval': retrieval, 'affinity': affinity,
                                   'segmentation': segmentation_evaluator, 'compositional': compositional_evaluator,
                                   'linear_probe': linear_probe_evaluator}


def applies(task: str, eval_set) -> bool:
  """Whether the eval set has what `task` needs."""
  if task == 'zeroshot':
    return bool(eval_set.class_names and eval_set.templates)
  if task == 'linear_probe':
    return getattr(eval_set, 'train_images', None) is not None
  if task == 'segmentation':
    return getattr(eval_set, 'masks', None) is not None and bool(eval_set.class_names)
  if task == 'compositional':
    return bool(getattr(eval_set, 'canonical_captions', None) and getattr(eval_set, 'hard_negatives', None)
                or getattr(eval_set, 'winoground_captions', None))
  return bool(len(eval_set.captions))


def run_evaluations(encoder: Encoder, eval_sets: list, tasks: tuple[str, ...], prefix: str = ''
                    ) -> dict[str, float]:
  """Every task that applies on every eval set, named `eval/<dataset>/<prefix><metric>`; image embeddings are
  computed once per set. Zero-shot classification needs class names, the caption tasks captions: a classification
  set has no retrieval metrics, COCO no zero-shot accuracy."""
  results = {}
  for eval_set in eval_sets:
    image_emb = encoder.images(eval_set.images)
    for task in tasks:
      if not applies(task, eval_set):
        continue
      for metric, value in EVALUATORS[task](encoder, eval_set, image_emb).items():
        results[f'eval/{eval_set.name}/{prefix}{metric}'] = value
  return results
