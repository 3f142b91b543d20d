"""Affinity consistency over a dataset (SaCo Eq. 3 and 4): the mean over queries i of Pearson(SI_i, ST_i), where
SI_i and ST_i are query i's cosine affinities to every image and to every caption. Computed in row chunks."""
from __future__ import annotations

import numpy as np


def per_query_affinity_consistency(image_emb: np.ndarray, text_emb: np.ndarray, chunk: int = 1024) -> np.ndarray:
  """image_emb, text_emb: [N, d] unit-norm, row i of each describing the same example -> [N] Pearson(SI_i, ST_i),
  each in [-1, 1]."""
  if image_emb.shape[0] != text_emb.shape[0]:
    raise ValueError(f'affinity consistency needs paired rows, got {image_emb.shape[0]} images and '
                     f'{text_emb.shape[0]} captions')
  rhos = []
  for start in range(0, len(image_emb), chunk):
    si = image_emb[start:start + chunk] @ image_emb.T  # [n, N]
    st = text_emb[start:start + chunk] @ text_emb.T
    si = si - si.mean(axis=1, keepdims=True)
    st = st - st.mean(axis=1, keepdims=True)
    rhos.append(np.sum(si * st, axis=1) / np.sqrt(np.sum(si * si, axis=1) * np.sum(st * st, axis=1) + 1e-12))
  return np.concatenate(rhos)


def affinity_consistency(image_emb: np.ndarray, text_emb: np.ndarray, chunk: int = 1024) -> float:
  """image_emb, text_emb: [N, d] unit-norm, row i of each describing the same example -> mean Pearson in [-1, 1]."""
  return float(np.mean(per_query_affinity_consistency(image_emb, text_emb, chunk)))


def first_captions(caption_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """caption_image [T] -> (images [M] that have a caption, ascending; captions [M]: the first caption of each): the
  pairs affinity consistency is measured on."""
  return np.unique(np.asarray(caption_image), return_index=True)
