"""Zero-shot classification: class embeddings from prompt templates, then nearest class by cosine."""
from __future__ import annotations

from typing import Sequence

import numpy as np


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


def zeroshot_metrics(image_emb: np.ndarray, classes: np.ndarray, labels: np.ndarray) -> dict[str, float]:
  """image_emb [N, d], classes [C, d] (both unit-norm), labels [N] -> top-1, top-5 and the chance level."""
  logits = image_emb @ classes.T
  num_classes = classes.shape[0]
  return {'zeroshot_top1': topk_accuracy(logits, labels, 1), 'zeroshot_top5': topk_accuracy(logits, labels, 5),
          'zeroshot_chance': 1.0 / num_classes}
