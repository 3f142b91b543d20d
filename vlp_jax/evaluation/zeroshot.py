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


@evaluator('zeroshot', needs=('class_names', 'templates'))
def zeroshot(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """Top-1/top-5/mean-per-class accuracy against the class embeddings of the set's templates."""
  classes = class_embeddings(encoder.texts, eval_set.class_names, eval_set.templates)
  return zeroshot_metrics(image_emb, classes, eval_set.labels)
