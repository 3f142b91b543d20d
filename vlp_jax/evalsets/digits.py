"""scikit-learn's bundled handwritten digits (UCI optical digits: 1797 images of 8x8, 10 classes) as an offline
eval set for zero-shot classification and the linear probe; it has no captions.

Images: the 0..16 ink counts scaled to 0..255 (round(v * 255 / 16)) as a white digit on black, the MNIST convention
that CLIP's MNIST evaluation uses, copied to 3 channels, then resized and normalised like every eval image.
Splits (deterministic, stratified, no randomness): within each class, in the dataset's order, odd positions are
'test' (half); of the even positions, every fifth is 'val' (a tenth of the data) and the rest 'train'. The linear
probe of 'test' trains on 'train' and 'val' together, that of 'val' on 'train' alone.
Class names are CLIP's for MNIST ('0' .. '9'); the templates (evalsets/prompts.py) start with CLIP's MNIST prompt.
"""
from __future__ import annotations

import numpy as np

from vlp_jax.data.image import image_ops
from vlp_jax.evalsets.base import EVAL_SETS, EvalSet, LoadRequest
from vlp_jax.evalsets.prompts import DIGITS_TEMPLATES

NAME = 'digits'
SPLITS = ('train', 'val', 'test')
# The splits the linear probe of an eval split trains on ('train' itself has none).
PROBE_TRAIN_SPLITS = {'test': ('train', 'val'), 'val': ('train',)}
CLASS_NAMES = tuple(str(digit) for digit in range(10))
MAX_INK = 16  # load_digits counts ink in 0..16 per pixel


def render_digits() -> tuple[np.ndarray, np.ndarray]:
  """All 1797 digits -> (images [N, 8, 8, 3] uint8, white on black; labels [N] int64 in 0..9)."""
  try:
    from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel
  except ImportError as error:
    raise ImportError("the 'digits' eval set needs scikit-learn: pip install scikit-learn") from error
  bunch = load_digits()
  grey = np.round(bunch.images * (255.0 / MAX_INK)).astype(np.uint8)
  return np.repeat(grey[..., None], 3, axis=-1), bunch.target.astype(np.int64)


def split_indices(labels: np.ndarray) -> dict[str, np.ndarray]:
  """labels [N] -> {'train', 'val', 'test': sorted indices}, disjoint, covering all N, stratified by label."""
  position = np.empty(len(labels), np.int64)  # rank of each example within its class, in dataset order
  for label in np.unique(labels):
    members = np.flatnonzero(labels == label)
    position[members] = np.arange(len(members))
  is_test = position % 2 == 1
  is_val = ~is_test & (position // 2 % 5 == 4)
  return {'train': np.flatnonzero(~is_test & ~is_val), 'val': np.flatnonzero(is_val), 'test': np.flatnonzero(is_test)}


def preprocess(images: np.ndarray, image_size: int,
               preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING) -> np.ndarray:
  """[N, 8, 8, 3] uint8 -> [N, S, S, 3] float32, resized and normalised by the model's preprocessing."""
  out = np.empty((len(images), image_size, image_size, 3), np.float32)
  for index, image in enumerate(images):
    out[index] = preprocessing(image, image_size)
  return out


def load_split(image_size: int, splits: tuple[str, ...],
               preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING
               ) -> tuple[np.ndarray, np.ndarray]:
  """The union of `splits` -> (images [N, S, S, 3] float32 normalised, labels [N] int64), in dataset order."""
  for split in splits:
    if split not in SPLITS:
      raise ValueError(f"split '{split}' is not valid; valid choices: {list(SPLITS)}")
  images, labels = render_digits()
  indices = split_indices(labels)
  chosen = np.sort(np.concatenate([indices[split] for split in splits]))
  return preprocess(images[chosen], image_size, preprocessing), labels[chosen]


@EVAL_SETS.register(NAME)
def load(name: str, request: LoadRequest) -> EvalSet:
  """A split ('train', 'val' or 'test') as an EvalSet, with the linear probe's train split in `train_images` /
  `train_labels` (for 'val' and 'test'; always loaded, it is small)."""
  images, labels = load_split(request.image_size, (request.split,), request.preprocessing)
  extra = {}
  if request.split in PROBE_TRAIN_SPLITS:
    extra['train_images'], extra['train_labels'] = load_split(request.image_size, PROBE_TRAIN_SPLITS[request.split],
                                                                  request.preprocessing)
  return EvalSet(name=name, images=images, labels=labels, class_names=CLASS_NAMES, templates=DIGITS_TEMPLATES,
                 captions=[], caption_image=np.zeros(0, np.int64), **extra)
