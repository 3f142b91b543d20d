"""Image-text retrieval recall@K in both directions, computed in row chunks so that no N x T matrix is held.

Two ways to say which candidates are right, chosen by the eval set (`EvalSet.identical_captions_match`):
  exact (the default, CLIP_benchmark's and open_clip's): for an image its own captions, for a caption its own image.
  identical text: any caption with the same text as one of the image's own captions, and for a caption any image
    that has a caption with its text. Sets whose captions repeat by construction need it: the embedded dataset's test
    split has 1500 images and 952 distinct short captions, and identical texts get identical embeddings. Under the
    exact rule an image whose caption repeats ties with the copies, and ties count against the query, so image->text
    R@1 cannot pass 0.48 (the share of unique captions); the copies of a query caption rank the images alike, so at
    most one of them finds its image and text->image R@1 cannot pass 952 / 1500 = 0.63, whatever the method. With
    identical texts as one positive the caps are gone, and a model is asked only what the captions can tell apart.
    Text identity, not token identity: it is a property of the data, the same for every model and context length
    (two texts that a model's tokenizer maps to one row, such as long captions cut at the context, are that model's
    limit and are scored as its error); on the embedded dataset, whose captions fit the 32-token context
    (`long_captions='compact'`) and never differ in case or spacing alone, the two coincide (952 texts, 952 distinct
    32-token rows).
"""
from __future__ import annotations

import fractions
import math
from typing import Sequence

import numpy as np

from vlp_jax.evaluation.base import evaluator


def retrieval_metrics(image_emb: np.ndarray, text_emb: np.ndarray, caption_image: np.ndarray,
                      ks: tuple[int, ...] = (1, 5, 10), chunk: int = 1024,
                      caption_groups: np.ndarray | None = None) -> dict[str, float]:
  """image_emb [N, d], text_emb [T, d] unit-norm; caption_image [T]: the image each caption belongs to.

  i2t: an image counts as found at K if any of its captions ranks in the top K of all T captions.
  t2i: a caption counts as found at K if its image ranks in the top K of all N images.
  Ties count against the query (a positive is ranked below every equal-scoring negative).
  caption_groups [T] int (e.g. `text_groups(captions)`): captions of one group count as one another's; a caption of
  the group of any of an image's captions is a hit for that image, and any image with a caption of a caption's group
  is a hit for that caption. None: exact matches only (the scoring of CLIP_benchmark, unchanged).
  """
  if caption_groups is not None:
    return _grouped_retrieval_metrics(image_emb, text_emb, caption_image, np.asarray(caption_groups), ks, chunk)
  num_images = image_emb.shape[0]
  # Score of the best positive caption for each image, and of each caption's image.
  best_positive = np.full(num_images, -np.inf)
  np.maximum.at(best_positive, caption_image, np.sum(text_emb * image_emb[caption_image], axis=-1))
  positive_for_text = np.sum(text_emb * image_emb[caption_image], axis=-1)
  i2t_rank = np.zeros(num_images, np.int64)
  for start in range(0, num_images, chunk):
    sims = image_emb[start:start + chunk] @ text_emb.T  # [n, T]
    own = caption_image[None, :] == np.arange(start, start + sims.shape[0])[:, None]
    i2t_rank[start:start + chunk] = np.sum((sims >= best_positive[start:start + chunk, None]) & ~own, axis=1)
  t2i_rank = np.zeros(len(text_emb), np.int64)
  for start in range(0, len(text_emb), chunk):
    sims = text_emb[start:start + chunk] @ image_emb.T  # [t, N]
    own = np.arange(num_images)[None, :] == caption_image[start:start + chunk, None]
    t2i_rank[start:start + chunk] = np.sum((sims >= positive_for_text[start:start + chunk, None]) & ~own, axis=1)
  return _recalls(i2t_rank, t2i_rank, ks)


def _recalls(i2t_rank: np.ndarray, t2i_rank: np.ndarray, ks: tuple[int, ...]) -> dict[str, float]:
  """Ranks [N] and [T] (negatives scoring at least the best positive) -> {'i2t_rK', 't2i_rK'}."""
  metrics = {}
  for k in ks:
    metrics[f'i2t_r{k}'] = float(np.mean(i2t_rank < k))
    metrics[f't2i_r{k}'] = float(np.mean(t2i_rank < k))
  return metrics


def text_groups(captions: Sequence[str]) -> np.ndarray:
  """captions [T] -> [T] int: one id per distinct text (exact string equality), numbered in sorted text order."""
  if not len(captions):
    return np.zeros(0, np.int64)
  return np.unique(np.asarray(captions, dtype=object), return_inverse=True)[1].reshape(-1).astype(np.int64)


def image_group_incidence(caption_image: np.ndarray, caption_groups: np.ndarray, num_images: int) -> np.ndarray:
  """caption_image [T], caption_groups [T] -> [N, G] bool: image n has a caption of group g (G = max group + 1)."""
  incidence = np.zeros((num_images, int(caption_groups.max(initial=-1)) + 1), bool)
  incidence[caption_image, caption_groups] = True
  return incidence


def _grouped_retrieval_metrics(image_emb: np.ndarray, text_emb: np.ndarray, caption_image: np.ndarray,
                               caption_groups: np.ndarray, ks: tuple[int, ...], chunk: int) -> dict[str, float]:
  """retrieval_metrics with the positives of `caption_groups`: the rank of a query is the number of non-positive
  candidates scoring at least its best positive."""
  num_images = image_emb.shape[0]
  incidence = image_group_incidence(caption_image, caption_groups, num_images)  # [N, G]
  i2t_rank = np.zeros(num_images, np.int64)
  for start in range(0, num_images, chunk):
    sims = image_emb[start:start + chunk] @ text_emb.T  # [n, T]
    positive = incidence[start:start + chunk][:, caption_groups]  # [n, T]
    i2t_rank[start:start + chunk] = _rank(sims, positive)
  t2i_rank = np.zeros(len(text_emb), np.int64)
  for start in range(0, len(text_emb), chunk):
    sims = text_emb[start:start + chunk] @ image_emb.T  # [t, N]
    positive = incidence[:, caption_groups[start:start + chunk]].T  # [t, N]
    t2i_rank[start:start + chunk] = _rank(sims, positive)
  return _recalls(i2t_rank, t2i_rank, ks)


def _rank(sims: np.ndarray, positive: np.ndarray) -> np.ndarray:
  """sims, positive [q, C] -> [q]: negatives scoring at least the best positive (every candidate if none is)."""
  best = np.max(np.where(positive, sims, -np.inf), axis=1, keepdims=True)
  return np.sum((sims >= best) & ~positive, axis=1)


def retrieval_chance(num_images: int, num_texts: int, k: int) -> tuple[float, float]:
  """Expected R@K of random embeddings with one caption per image: (i2t, t2i)."""
  return min(k / num_texts, 1.0), min(k / num_images, 1.0)


def _hit_chance(candidates: int, positives: np.ndarray, k: int) -> np.ndarray:
  """P(at least one of `positives` [q] candidates in a random top k of `candidates`) = 1 - C(M - p, k) / C(M, k)."""
  total = math.comb(candidates, k)  # exact fractions: k / M at k = 1, to the last bit
  return np.array([float(1 - fractions.Fraction(math.comb(candidates - int(p), k), total)) for p in positives])


def random_ranking_recall(caption_image: np.ndarray, num_images: int, k: int,
                          caption_groups: np.ndarray | None = None) -> tuple[float, float]:
  """Expected (i2t, t2i) R@K of a random ranking (all N! and T! orders equally likely, so no ties) under the rule of
  `retrieval_metrics`: the mean over queries of the chance that a random top K holds one of the query's positives.
  An image's positives are its captions (5 for COCO: i2t chance 5 / T at K = 1) or, with groups, every caption of
  their groups (g / T for an image whose one caption text is shared by g captions). With one caption per image and no
  groups this is `retrieval_chance`."""
  caption_image = np.asarray(caption_image)
  num_texts = len(caption_image)
  groups = np.arange(num_texts) if caption_groups is None else np.asarray(caption_groups)
  group_sizes = np.bincount(groups)  # [G] captions per group
  pair_image, pair_group = np.unique(np.stack([caption_image, groups]), axis=1)  # distinct (image, group) pairs
  text_positives = np.bincount(pair_image, weights=group_sizes[pair_group], minlength=num_images)  # [N]
  image_positives = np.bincount(pair_group, minlength=len(group_sizes))[groups]  # [T]: images with the text
  return (float(np.mean(_hit_chance(num_texts, text_positives, min(k, num_texts)))),
          float(np.mean(_hit_chance(num_images, image_positives, min(k, num_images)))))


@evaluator('retrieval', needs=('captions',))
def retrieval(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """R@1/5/10 in both directions, with the R@1 of a random ranking beside; identical caption texts count as one
  another's match where the set says so (`EvalSet.identical_captions_match`)."""
  groups = text_groups(eval_set.captions) if eval_set.identical_captions_match else None
  metrics = retrieval_metrics(image_emb, encoder.texts(eval_set.captions), eval_set.caption_image,
                              caption_groups=groups)
  metrics['i2t_r1_chance'], metrics['t2i_r1_chance'] = random_ranking_recall(eval_set.caption_image,
                                                                              len(image_emb), 1, groups)
  return metrics
