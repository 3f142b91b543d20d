"""Compositionality (COSMOS): pick the true caption over hard negatives.

  - SugarCrepe (evalsets/compositional.py): each image has a positive and one hard negative caption; accuracy is
    the fraction of images whose embedding is strictly closer to the positive (ties fail), as in the benchmark's
    `main_eval.py`, per category file and pooled.
  - Winoground: two images and two captions per group; text, image and group scores.
  - The embedded dataset: each image's canonical caption against all its hard negatives (swapped attributes or
    relations, a replaced colour or shape). `compositional_acc` counts an image as correct only when the canonical
    caption beats every one of its negatives; `compositional_pair_acc` is the fraction of (image, negative) pairs won,
    the SugarCrepe measure pooled over all negatives.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from vlp_jax.evaluation.base import evaluator


def winoground_similarity(image_emb: np.ndarray, text_emb: np.ndarray) -> np.ndarray:
  """image_emb [G, 2, d], text_emb [G, 2, d] unit-norm -> sim [G, 2, 2], sim[g, i, c] = <image i, caption c>."""
  return np.einsum('gid,gcd->gic', image_emb, text_emb)


def winoground_scores(sim: np.ndarray) -> dict[str, float]:
  """sim [G, 2, 2] with sim[g, i, c] the similarity of image i and caption c (image i is described by caption i).

  text: each image prefers its own caption; image: each caption prefers its own image; group: both. Strict
  inequalities, as in the Winoground paper.
  """
  text = (sim[:, 0, 0] > sim[:, 0, 1]) & (sim[:, 1, 1] > sim[:, 1, 0])
  image = (sim[:, 0, 0] > sim[:, 1, 0]) & (sim[:, 1, 1] > sim[:, 0, 1])
  return {'text': float(np.mean(text)), 'image': float(np.mean(image)), 'group': float(np.mean(text & image))}


def beats_negatives(image_emb: np.ndarray, pos_emb: np.ndarray, neg_emb: np.ndarray, neg_image: np.ndarray
                    ) -> np.ndarray:
  """image_emb, pos_emb [N, d]; neg_emb [M, d] with neg_image [M] the image each negative belongs to (all unit-norm)
  -> [M] bool: the image's positive scores strictly above that negative."""
  pos_score = np.sum(image_emb * pos_emb, axis=-1)
  neg_score = np.sum(image_emb[neg_image] * neg_emb, axis=-1)
  return pos_score[neg_image] > neg_score


def hard_negative_accuracy(image_emb: np.ndarray, pos_emb: np.ndarray, neg_emb: np.ndarray, neg_image: np.ndarray
                           ) -> tuple[float, float]:
  """Shapes as in `beats_negatives` -> (all, pair): the fraction of images (those with at least one negative) whose
  positive beats every negative, and the fraction of (image, negative) pairs won."""
  wins = beats_negatives(image_emb, pos_emb, neg_emb, neg_image)
  num_images = len(image_emb)
  losses = np.bincount(neg_image, weights=(~wins).astype(np.float64), minlength=num_images)
  has_negatives = np.bincount(neg_image, minlength=num_images) > 0
  return float(np.mean(losses[has_negatives] == 0)), float(np.mean(wins))


def flatten_negatives(hard_negatives: Sequence[Sequence[str]]) -> tuple[list[str], np.ndarray]:
  """Per-image lists of negatives -> (M captions, [M] index of the image each belongs to)."""
  counts = [len(negatives) for negatives in hard_negatives]
  return [c for negatives in hard_negatives for c in negatives], np.repeat(np.arange(len(counts)), counts)


# Scores of random embeddings (the Winoground paper): each of the two comparisons of text and image is a coin flip;
# the group score's chance, 1/6, is the paper's.
WINOGROUND_CHANCE = {'winoground_text_chance': 0.25, 'winoground_image_chance': 0.25,
                     'winoground_group_chance': 1 / 6}


def winoground_evaluator(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """Winoground text, image and group scores on an eval set with `winoground_captions` [2G] (images [2G]: member k
  of group g at 2g + k)."""
  captions = eval_set.winoground_captions
  if len(captions) != len(image_emb) or len(captions) % 2:
    raise ValueError(f'Winoground needs two images and two captions per group: got {len(image_emb)} images and '
                     f'{len(captions)} captions')
  text_emb = encoder.texts(captions)
  sim = winoground_similarity(image_emb.reshape(-1, 2, image_emb.shape[-1]),
                              text_emb.reshape(-1, 2, text_emb.shape[-1]))
  return {**{f'winoground_{k}': v for k, v in winoground_scores(sim).items()}, **WINOGROUND_CHANCE}


@evaluator('compositional', ('canonical_captions', 'hard_negatives'), ('winoground_captions',))
def compositional_evaluator(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """Canonical caption against its hard negatives, on an eval set with `canonical_captions` ([N] str) and
  `hard_negatives` ([N] lists of str), or Winoground's scores on one with `winoground_captions`; {} otherwise.
  SugarCrepe is the first kind (one negative per image), with `compositional_acc_<category>` per category file
  where the set has `categories` [N].

  compositional_chance is the accuracy of random embeddings: the mean of 1 / (1 + negatives) over the images.
  """
  if getattr(eval_set, 'winoground_captions', None):
    return winoground_evaluator(encoder, eval_set, image_emb)
  canonical = getattr(eval_set, 'canonical_captions', None)
  hard_negatives = getattr(eval_set, 'hard_negatives', None)
  if not canonical or hard_negatives is None:
    return {}
  if not len(canonical) == len(hard_negatives) == len(image_emb):
    raise ValueError(f'{len(image_emb)} images, {len(canonical)} canonical captions and {len(hard_negatives)} '
                     'hard-negative lists: each image needs one of each')
  negatives, neg_image = flatten_negatives(hard_negatives)
  if not negatives:
    return {}
  pos_emb, neg_emb = encoder.texts(canonical), encoder.texts(negatives)
  all_acc, pair_acc = hard_negative_accuracy(image_emb, pos_emb, neg_emb, neg_image)
  counts = np.array([len(n) for n in hard_negatives if n])
  metrics = {'compositional_acc': all_acc, 'compositional_pair_acc': pair_acc,
             'compositional_chance': float(np.mean(1.0 / (1 + counts)))}
  categories = np.asarray(getattr(eval_set, 'categories', None) or [], dtype=object)
  for category in dict.fromkeys(categories.tolist()):
    rows = np.flatnonzero(categories == category)
    negative_rows = np.flatnonzero(np.isin(neg_image, rows))
    remap = np.full(len(image_emb), -1)
    remap[rows] = np.arange(len(rows))
    metrics[f'compositional_acc_{category}'] = hard_negative_accuracy(
        image_emb[rows], pos_emb[rows], neg_emb[negative_rows], remap[neg_image[negative_rows]])[0]
  return metrics
