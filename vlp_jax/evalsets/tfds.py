"""Evaluation sets from tensorflow-datasets, read without TensorFlow (data/sources/tfds_splits.py), prepared in
`config.data.tfds_dir`: imagenet2012, cifar10, cifar100, caltech101, oxford_iiit_pet, oxford_flowers102 (zero-shot
and linear probe) and coco_captions (retrieval, the Karpathy splits). For 'test' each set is read from the dataset's
evaluation split (ImageNet's validation set, the CIFAR test sets, COCO's Karpathy test split); 'val' exists only for
coco_captions.

ImageNet's distribution shifts, test sets only, evaluated zero-shot with ImageNet's curated class names and OpenAI's
80 ImageNet prompts: imagenet_v2 (matched-frequency, 10k images), imagenet_sketch (50k), imagenet_r (30k) and
imagenet_a (7.5k), these two over their 200 classes only (labels 0..199, class_names the 200; as CLIP evaluates
them), and imagenet2012_real: ImageNet's validation images scored against the ReaL labels (label_sets; a top-1 or
top-5 hit is a prediction among an image's real labels, and the images with no real label are left out, as in the
ReaL paper; evaluation/zeroshot.py), reported as zeroshot_top1 etc. like the others.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from vlp_jax.data.image import image_ops
from vlp_jax.data.sources import tfds_splits as tfds_data
from vlp_jax.errors import DataNotFoundError
from vlp_jax.evalsets import prompts
from vlp_jax.evalsets.base import EVAL_INPUTS, EVAL_SETS, EvalSet, LoadRequest
from vlp_jax.evalsets.streamed import StreamedImages

# Reading a split of at least this many examples prints its progress.
LOAD_PROGRESS_MIN = 20_000
# An eval set's float32 images are held in memory up to this size; larger sets are decoded as they are evaluated.
DEFAULT_MEMORY_LIMIT_BYTES = 8 * 2**30
# The Karpathy COCO test split has 5,000 images and 25,010 captions (a few images have more than 5); the usual protocol
# keeps the first 5 of each image (25,000 captions).
DEFAULT_MAX_CAPTIONS_PER_IMAGE = 5
# Each class dataset's own zero-shot prompts (CLIP's where it published them); others get prompts.SIMPLE_TEMPLATES.
TEMPLATES = {'imagenet2012': prompts.OPENAI_IMAGENET_TEMPLATES, 'cifar10': prompts.CIFAR_TEMPLATES,
             'cifar100': prompts.CIFAR_TEMPLATES, 'caltech101': prompts.CALTECH101_TEMPLATES,
             'oxford_iiit_pet': prompts.PETS_TEMPLATES, 'oxford_flowers102': prompts.FLOWERS_TEMPLATES,
             **{name: prompts.OPENAI_IMAGENET_TEMPLATES for name in tfds_data.IMAGENET_FAMILY}}


def pad_label_sets(label_sets: list[list[int]]) -> np.ndarray:
  """Lists of labels (maybe empty) -> [N, K] int64, each row its labels then -1s (K the longest list, at least 1)."""
  padded = np.full((len(label_sets), max([1, *map(len, label_sets)])), -1, np.int64)
  for row, labels in enumerate(label_sets):
    padded[row, :len(labels)] = labels
  return padded


def _split_arrays(name: str, source: Any, count: int, image_size: int, max_captions_per_image: int | None,
                  memory_limit_bytes: int,
                  preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING
                  ) -> tuple[Any, np.ndarray, list[str], np.ndarray, np.ndarray | None]:
  """The first `count` examples of an `open_source` split: images (an in-memory [count, S, S, 3] float32 array, or a
  StreamedImages above `memory_limit_bytes`), labels [count], captions [T], caption_image [T] and, for a dataset
  with several labels per example, label_sets [count, K] (`pad_label_sets`; None for the others)."""
  spec = tfds_data.dataset_spec(name)
  preprocess = lambda features: preprocessing(tfds_data.rgb_image(features[spec.image_key]), image_size)  # noqa: E731
  streamed = count * image_size * image_size * 3 * 4 > memory_limit_bytes
  images = None if streamed else np.empty((count, image_size, image_size, 3), np.float32)  # filled in place
  labels = np.empty(count, np.int64)
  captions, caption_image, label_sets = [], [], []
  report_every = max(count // 10, 1) if count >= LOAD_PROGRESS_MIN else 0
  for index in range(count):
    if report_every and index % report_every == 0:
      print(f'{name}: read {index}/{count} examples', flush=True)
    features = source[index]
    fields = tfds_data.example_fields(name, features)
    if images is not None:
      images[index] = preprocess(features)
    labels[index] = fields['label']
    if 'label_set' in fields:
      label_sets.append(fields['label_set'])
    kept = fields['captions'][:max_captions_per_image]
    captions.extend(kept)
    caption_image.extend([index] * len(kept))
  if streamed:
    print(f'{name}: {count} images at {image_size}px take {count * image_size**2 * 12 / 2**30:.1f} GiB as float32, '
          f'above {memory_limit_bytes / 2**30:.1f} GiB: they are decoded as they are evaluated', flush=True)
    images = StreamedImages(lambda index: preprocess(source[index]), count, image_size)
  label_sets = pad_label_sets(label_sets) if spec.label_set_key else None
  return images, labels, captions, np.array(caption_image, np.int64), label_sets


def load_eval_set(name: str, split: str | None, data_dir: str | None, image_size: int,
                  max_examples: int | None = None, *, probe_train_examples: int | None = None,
                  max_captions_per_image: int | None = DEFAULT_MAX_CAPTIONS_PER_IMAGE,
                  memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
                  preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING) -> EvalSet:
  """A split of a tfds dataset as a EvalSet, images resized and normalised for `image_size` by the model's
  `preprocessing`.

  The images are held in memory as one float32 array when it takes at most `memory_limit_bytes`; a larger set
  (ImageNet's validation set at 224 px) gets a streamed.StreamedImages that decodes the images as the evaluators
  read them, chunk by chunk, on every evaluation.
  max_examples: keep the first N examples (tfds shuffled the files when it prepared them).
  probe_train_examples: for a class dataset, also attach the first N examples of its 'train' split as
  train_images / train_labels for the linear probe (0: the whole split; None: none).
  Class datasets: labels, class names and the dataset's prompts, no captions (captions [] and caption_image [0]).
  Caption datasets: labels -1, no class names, the captions of every image flattened, the first
  `max_captions_per_image` of each (None: all), with caption_image [T] the index of each caption's image.
  """
  if max_examples is not None and max_examples < 1:
    raise ValueError(f'max_examples must be positive or None, got {max_examples}')
  source = tfds_data.open_source(name, split, data_dir)
  count = len(source) if max_examples is None else min(len(source), max_examples)
  images, labels, captions, caption_image, label_sets = _split_arrays(
      name, source, count, image_size, max_captions_per_image, memory_limit_bytes, preprocessing)
  probe = {}
  spec = tfds_data.dataset_spec(name)
  if probe_train_examples is not None and spec.label_key and 'train' in spec.splits:  # test-only sets: no probe
    try:
      train = tfds_data.open_source(name, 'train', data_dir)
    except FileNotFoundError as error:
      raise DataNotFoundError(f'the linear probe on {name} trains on its train split: {error}\n(or leave linear_probe '
                            'out of config.eval.tasks / --evals)') from None
    train_count = min(len(train), probe_train_examples or len(train))
    train_images, train_labels, _, _, _ = _split_arrays(name, train, train_count, image_size, 0, memory_limit_bytes,
                                                        preprocessing)
    probe = {'train_images': train_images, 'train_labels': train_labels}
  class_names = tfds_data.class_names(name, source)
  templates = TEMPLATES.get(name, prompts.SIMPLE_TEMPLATES) if class_names else ()
  return EvalSet(name=name, images=images, labels=labels, class_names=class_names, templates=templates,
                 captions=captions, caption_image=caption_image, label_sets=label_sets, **probe)


def load(name: str, request: LoadRequest) -> EvalSet:
  """The registered loader: `load_eval_set` with the config's tfds directory and caps."""
  data = request.data
  return load_eval_set(name, None if request.split == 'test' else request.split, data.tfds_dir or None,
                       request.image_size, max_examples=data.eval_max_examples or None,
                       probe_train_examples=data.probe_train_examples if request.linear_probe else None,
                       preprocessing=request.preprocessing)


def missing_inputs(name: str, request: LoadRequest) -> list[str]:
  """What `load` would not find in config.data.tfds_dir: the eval split and, for the linear probe, the train split."""
  spec = tfds_data.dataset_spec(name)
  splits = [None if request.split == 'test' else request.split]
  if request.linear_probe and spec.label_key and 'train' in spec.splits:
    splits.append('train')
  problems = (tfds_data.preparation_problem(name, split, request.data.tfds_dir or None) for split in splits)
  return [f"config.eval.datasets has {name}, read from config.data.tfds_dir='{request.data.tfds_dir}': {problem}"
          for problem in dict.fromkeys(problems) if problem]  # one line for a set missing as a whole


for _name in tfds_data.DATASETS:
  EVAL_SETS.add(_name, load)
  EVAL_INPUTS.add(_name, missing_inputs)
