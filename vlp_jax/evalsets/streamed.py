"""Eval-set images that are decoded when they are read, for sets whose float32 images would not fit in memory
(ImageNet's 50,000 validation images at 224 px take 28 GiB): the evaluators read images in chunks, so at most a
chunk is ever held."""
from __future__ import annotations

import concurrent.futures
import os
from typing import Callable

import numpy as np


class StreamedImages:
  """A read-only [N, S, S, 3] float32 array whose rows `load(i)` makes on demand.

  Indexing with an int gives one image [S, S, 3]; a slice, a list or an index array gives a stacked [n, S, S, 3]
  array, decoded by a thread pool. Converting the whole sequence to one array is refused, since that is what it
  exists to avoid.
  """

  def __init__(self, load: Callable[[int], np.ndarray], count: int, image_size: int, threads: int | None = None):
    self._load = load
    self.shape = (count, image_size, image_size, 3)
    self.dtype = np.dtype(np.float32)
    self.ndim = 4
    self._threads = threads or min(16, os.cpu_count() or 1)

  def __len__(self) -> int:
    return self.shape[0]

  def _row(self, index: int) -> np.ndarray:
    if not -len(self) <= index < len(self):
      raise IndexError(f'image {index} is out of range for {len(self)} images')
    image = np.asarray(self._load(index % len(self)), np.float32)
    if image.shape != self.shape[1:]:
      raise ValueError(f'image {index} has shape {image.shape}, expected {self.shape[1:]}')
    return image

  def __getitem__(self, index) -> np.ndarray:
    if isinstance(index, (int, np.integer)):
      return self._row(int(index))
    rows = range(len(self))[index] if isinstance(index, slice) else np.asarray(index).reshape(-1).tolist()
    if not len(rows):
      return np.zeros((0, *self.shape[1:]), np.float32)
    with concurrent.futures.ThreadPoolExecutor(self._threads) as pool:
      return np.stack(list(pool.map(self._row, rows)))

  def __array__(self, dtype=None, copy=None):
    raise TypeError(f'StreamedImages decodes its {len(self)} images as they are read; index it in chunks '
                    '(images[start:stop]) rather than converting it whole')
