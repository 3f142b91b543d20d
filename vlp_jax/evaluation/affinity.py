"""Affinity consistency over a dataset (SaCo Eq. 3 and 4): the mean over queries i of Pearson(SI_i, ST_i), where
SI_i and ST_i are query i's cosine affinities to every other image and to every other caption. Computed in row
chunks."""
from __future__ import annotations

import numpy as np

from vlp_jax.evaluation.base import evaluator


def per_query_affinity_consistency(image_emb: np.ndarray, text_emb: np.ndarray, chunk: int = 1024) -> np.ndarray:
  """image_emb, text_emb: [N, d] unit-norm, row i of each describing the same example -> [N] Pearson(SI_i, ST_i),
  each in [-1, 1], over the other samples j != i (SaCo: "the query and all the other samples"). Keeping j = i would
  put the same 1 in both rows and inflate the correlation: 0.33 instead of 0 for unrelated embeddings at N = 128."""
  if image_emb.shape[0] != text_emb.shape[0]:
    raise ValueError(f'affinity consistency needs paired rows, got {image_emb.shape[0]} images and '
                     f'{text_emb.shape[0]} captions')
  n = len(image_emb)
  rhos = []
  for start in range(0, n, chunk):
    si = image_emb[start:start + chunk] @ image_emb.T  # [c, N]
    st = text_emb[start:start + chunk] @ text_emb.T
    others = np.arange(n)[None, :] != np.arange(start, start + len(si))[:, None]  # [c, N], False at j = i
    si = np.where(others, si - np.sum(si * others, axis=1, keepdims=True) / (n - 1), 0.0)
    st = np.where(others, st - np.sum(st * others, axis=1, keepdims=True) / (n - 1), 0.0)
    rhos.append(np.sum(si * st, axis=1) / np.sqrt(np.sum(si * si, axis=1) * np.sum(st * st, axis=1) + 1e-12))
  return np.concatenate(rhos)


def affinity_consistency(image_emb: np.ndarray, text_emb: np.ndarray, chunk: int = 1024) -> float:
  """image_emb, text_emb: [N, d] unit-norm, row i of each describing the same example -> mean Pearson in [-1, 1]."""
  return float(np.mean(per_query_affinity_consistency(image_emb, text_emb, chunk)))


def first_captions(caption_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """caption_image [T] -> (images [M] that have a caption, ascending; captions [M]: the first caption of each): the
  pairs affinity consistency is measured on."""
  return np.unique(np.asarray(caption_image), return_index=True)


@evaluator('affinity', needs=('captions',))
def affinity(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """SaCo's affinity consistency between each image and its first caption."""
  images, first = first_captions(eval_set.caption_image)
  text_emb = encoder.texts([eval_set.captions[i] for i in first])
  return {'affinity_consistency': affinity_consistency(image_emb[images], text_emb)}
