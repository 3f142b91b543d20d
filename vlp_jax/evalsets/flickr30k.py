"""Flickr30k retrieval in Karpathy's split, from a local copy (tensorflow-datasets has no Flickr30k).

`config.data.flickr30k_dir` holds Karpathy's dataset_flickr30k.json (from his NeuralTalk release,
cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip: {"images": [{"filename", "split":
train|val|test|restval, "sentences": [{"raw"}, ...]}, ...]}) and the images, in flickr30k-images/ or images/.
'test' is the 1,000 test images, 'val' the 1,014 val images; each keeps its first 5 captions (the usual protocol),
evaluated as retrieval like coco_captions. Images are decoded as the evaluators read them.
"""
from __future__ import annotations

import json
import os

import numpy as np

from vlp_jax.data.image import image_ops
from vlp_jax.errors import DataNotFoundError
from vlp_jax.evalsets.base import EVAL_INPUTS, EVAL_SETS, EvalSet, LoadRequest
from vlp_jax.evalsets.compositional import _image_loader, _missing
from vlp_jax.evalsets.streamed import StreamedImages

JSON_NAME = 'dataset_flickr30k.json'
IMAGE_FOLDERS = ('flickr30k-images', 'images')
CAPTIONS_PER_IMAGE = 5
FLICKR30K_HELP = (
    f'Flickr30k: put Karpathy\'s {JSON_NAME} (caption_datasets.zip from '
    'https://cs.stanford.edu/people/karpathy/deepimagesent/) and the Flickr30k images (flickr30k-images/, from '
    'https://shannon.cs.illinois.edu/DenotationGraph/ on request) into one directory, as DIR/dataset_flickr30k.json '
    'and DIR/flickr30k-images/*.jpg (or DIR/images/), then pass --config.data.flickr30k_dir=DIR.')


def read_karpathy(json_path: str, split: str, max_captions_per_image: int | None = CAPTIONS_PER_IMAGE,
                  ) -> tuple[list[str], list[str], np.ndarray]:
  """Karpathy's caption file -> (image file names of `split`, in file order; their captions, the first
  `max_captions_per_image` of each (None: all); caption_image [T], the index of each caption's image)."""
  with open(json_path, encoding='utf-8') as f:
    entries = json.load(f)
  try:
    chosen = [e for e in entries['images'] if e['split'] == split]
    filenames, captions, caption_image = [], [], []
    for index, entry in enumerate(chosen):
      filenames.append(entry['filename'])
      kept = [s['raw'] for s in entry['sentences']][:max_captions_per_image]
      captions += kept
      caption_image += [index] * len(kept)
  except (KeyError, TypeError) as error:
    raise ValueError(f'{json_path} is not in the Karpathy format ({{"images": [{{"filename", "split", '
                     f'"sentences": [{{"raw"}}]}}]}}): {error!r}') from None
  return filenames, captions, np.array(caption_image, np.int64)


def missing_json(directory: str) -> str | None:
  """Why `directory` (config.data.flickr30k_dir) is not a Flickr30k folder, with how to make one; None when it holds
  Karpathy's caption file (the images are checked as they are listed, when the set loads)."""
  if directory and os.path.exists(os.path.join(directory, JSON_NAME)):
    return None
  return f"no {JSON_NAME} in config.data.flickr30k_dir='{directory}'.\n{FLICKR30K_HELP}"


def flickr30k_eval_set(directory: str, split: str, image_size: int, max_examples: int | None = None,
                       preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING) -> EvalSet:
  """The `split` ('test', 'val', 'train' or 'restval') images of a Flickr30k folder with their first 5 captions.
  max_examples: keep the first N images (in the json's order)."""
  problem = missing_json(directory)
  if problem:
    raise DataNotFoundError(problem)
  json_path = os.path.join(directory, JSON_NAME)
  filenames, captions, caption_image = read_karpathy(json_path, split)
  if not filenames:
    raise ValueError(f"{json_path} has no images in the split '{split}'")
  if max_examples:
    kept = caption_image < max_examples
    filenames, captions, caption_image = (filenames[:max_examples], [c for c, k in zip(captions, kept) if k],
                                          caption_image[kept])
  image_dir = next((os.path.join(directory, d) for d in IMAGE_FOLDERS if os.path.isdir(os.path.join(directory, d))),
                   os.path.join(directory, IMAGE_FOLDERS[0]))
  paths = [os.path.join(image_dir, name) for name in filenames]
  _missing(paths, FLICKR30K_HELP)
  return EvalSet(name='flickr30k', images=StreamedImages(_image_loader(paths, image_size, preprocessing), len(paths),
                                                         image_size),
                 labels=np.full(len(paths), -1), class_names=(), templates=(), captions=captions,
                 caption_image=caption_image)


@EVAL_INPUTS.register('flickr30k')
def flickr30k_missing_inputs(name: str, request: LoadRequest) -> list[str]:
  del name
  problem = missing_json(request.data.flickr30k_dir)
  return [f'config.eval.datasets has flickr30k: {problem}'] if problem else []


@EVAL_SETS.register('flickr30k')
def load_flickr30k(name: str, request: LoadRequest) -> EvalSet:
  """Karpathy's test split for 'test', its val split for 'val'."""
  del name
  data = request.data
  return flickr30k_eval_set(data.flickr30k_dir, request.split, request.image_size,
                            max_examples=data.eval_max_examples or None, preprocessing=request.preprocessing)
