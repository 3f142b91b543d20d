"""Pre-extracted teacher embeddings, looked up by example key (SaCo's pseudo-affinity mimic targets).

The table is the .npz that `python -m vlp_jax.embed --dataset=... --split=train` writes: `keys` and
`image_embeddings` (the paper finds mimicking the image modality best). It is loaded once per process, so it must fit
in host memory: 2.8M CC3M examples at 512 dims take 5.7 GB in float32.
"""
from __future__ import annotations

import functools

import numpy as np


class TeacherTable:

  def __init__(self, path: str):
    with np.load(path, allow_pickle=False) as data:
      if 'keys' not in data or 'image_embeddings' not in data:
        raise ValueError(f'{path} lacks `keys` / `image_embeddings`; write it with `python -m vlp_jax.embed '
                         '--checkpoint=TEACHER --dataset=NAME --split=train --output=FILE.npz`')
      self.embeddings = np.asarray(data['image_embeddings'], np.float32)
      self.index = {str(k): i for i, k in enumerate(data['keys'])}
    self.path = path

  def __getitem__(self, key: str) -> np.ndarray:
    """[d] float32 embedding of the example `key`."""
    row = self.index.get(key)
    if row is None:
      raise KeyError(f"example '{key}' has no embedding in {self.path}: it was written for another dataset or split")
    return self.embeddings[row]


@functools.lru_cache(maxsize=4)
def load_table(path: str) -> TeacherTable:
  """One table per process (grain workers each load their own on first use)."""
  return TeacherTable(path)
