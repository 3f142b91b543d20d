"""Image-text retrieval recall@K in both directions, computed in row chunks so that no N x T matrix is held."""
from __future__ import annotations

import numpy as np

from vlp_jax.evaluation.base import evaluator


def retrieval_metrics(image_emb: np.ndarray, text_emb: np.ndarray, caption_image: np.ndarray,
                      ks: tuple[int, ...] = (1, 5, 10), chunk: int = 1024) -> dict[str, float]:
  """image_emb [N, d], text_emb [T, d] unit-norm; caption_image [T]: the image each caption belongs to.

  i2t: an image counts as found at K if any of its captions ranks in the top K of all T captions.
  t2i: a caption counts as found at K if its image ranks in the top K of all N images.
  Ties count against the query (a positive is ranked below every equal-scoring negative).
  """
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
  metrics = {}
  for k in ks:
    metrics[f'i2t_r{k}'] = float(np.mean(i2t_rank < k))
    metrics[f't2i_r{k}'] = float(np.mean(t2i_rank < k))
  return metrics


def retrieval_chance(num_images: int, num_texts: int, k: int) -> tuple[float, float]:
  """Expected R@K of random embeddings with one caption per image: (i2t, t2i)."""
  return min(k / num_texts, 1.0), min(k / num_images, 1.0)


@evaluator('retrieval', needs=('captions',))
def retrieval(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """R@1/5/10 in both directions, with the R@1 of a random ranking beside."""
  metrics = retrieval_metrics(image_emb, encoder.texts(eval_set.captions), eval_set.caption_image)
  metrics['i2t_r1_chance'], metrics['t2i_r1_chance'] = retrieval_chance(len(image_emb), len(eval_set.captions), 1)
  return metrics
