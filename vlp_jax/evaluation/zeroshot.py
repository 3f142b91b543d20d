"""Zero-shot classification: class embeddings from prompt templates, then nearest class by cosine."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from vlp_jax.evaluation.base import evaluator


def class_embeddings(encode_texts, class_names: Sequence[str], templates: Sequence[str]) -> np.ndarray:
  """Mean of the normalised template embeddings per class, re-normalised: [C, d]."""
  prompts = [t.format(name) for name in class_names for t in templates]
  emb = encode_texts(prompts).reshape(len(class_names), len(templates), -1).mean(axis=1)
  return emb / np.linalg.norm(emb, axis=-1, keepdims=True)


def topk_accuracy(logits: np.ndarray, labels: np.ndarray, k: int) -> float:
  """logits [N, C], labels [N] -> fraction of rows whose label is among the k largest logits."""
  k = min(k, logits.shape[1])
  topk = np.argpartition(-logits, k - 1, axis=1)[:, :k]
  return float(np.mean(np.any(topk == labels[:, None], axis=1)))


def mean_per_class_accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
  """predictions [N], labels [N] (class ids) -> the mean over the classes present in `labels` of the fraction of
  each class's examples predicted correctly (top-1 recall), so that every class weighs the same."""
  predictions, labels = np.asarray(predictions), np.asarray(labels)
  classes, index = np.unique(labels, return_inverse=True)
  correct = np.bincount(index, weights=predictions == labels, minlength=len(classes))
  return float(np.mean(correct / np.bincount(index, minlength=len(classes))))


def zeroshot_metrics(image_emb: np.ndarray, classes: np.ndarray, labels: np.ndarray) -> dict[str, float]:
  """image_emb [N, d], classes [C, d] (both unit-norm), labels [N] -> top-1, top-5, mean-per-class accuracy and the
  chance level of top-1 and mean-per-class accuracy (1 / C)."""
  logits = image_emb @ classes.T
  num_classes = classes.shape[0]
  return {'zeroshot_top1': topk_accuracy(logits, labels, 1), 'zeroshot_top5': topk_accuracy(logits, labels, 5),
          'zeroshot_mean_per_class': mean_per_class_accuracy(np.argmax(logits, axis=1), labels),
          'zeroshot_chance': 1.0 / num_classes}


def label_set_metrics(image_emb: np.ndarray, classes: np.ndarray, label_sets: np.ndarray,
                      labels: np.ndarray) -> dict[str, float]:
  """Zero-shot against several correct labels per image (ImageNet ReaL): label_sets [N, K] (each row an image's
  labels padded with -1), labels [N] its single label (ImageNet's original one, which groups the mean-per-class).

  Images with no label in their set are left out, as the ReaL paper does. Over the rest: top-1 is the fraction whose
  best class is one of their labels, top-5 the fraction with one of their labels among the best 5, mean-per-class
  the top-1 hits averaged per original label; the chance level is 1 / C.
  """
  label_sets, labels = np.asarray(label_sets), np.asarray(labels)
  kept = (label_sets >= 0).any(axis=1)
  if not kept.any():
    raise ValueError('no image has a label in its label set')
  logits, label_sets, labels = (image_emb @ classes.T)[kept], label_sets[kept], labels[kept]
  k = min(5, logits.shape[1])
  top5 = np.argpartition(-logits, k - 1, axis=1)[:, :k]
  top1 = np.argmax(logits, axis=1)
  hit1 = (top1[:, None] == label_sets).any(axis=1)
  hit5 = (top5[:, :, None] == label_sets[:, None, :]).any(axis=(1, 2))
  classes_present, index = np.unique(labels, return_inverse=True)
  per_class = np.bincount(index, weights=hit1, minlength=len(classes_present)) / np.bincount(index)
  return {'zeroshot_top1': float(hit1.mean()), 'zeroshot_top5': float(hit5.mean()),
          'zeroshot_mean_per_class': float(per_class.mean()), 'zeroshot_chance': 1.0 / classes.shape[0]}


@evaluator('zeroshot', needs=('class_names', 'templates'))
def zeroshot(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """Top-1/top-5/mean-per-class accuracy against the class embeddings of the set's templates (against each image's
  label set where the set has label_sets: `label_set_metrics`)."""
  classes = class_embeddings(encoder.texts, eval_set.class_names, eval_set.templates)
  if getattr(eval_set, 'label_sets', None) is not None:
    return label_set_metrics(image_emb, classes, eval_set.label_sets, eval_set.labels)
  return zeroshot_metrics(image_emb, classes, eval_set.labels)
