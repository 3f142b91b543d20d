"""Datasets by name: where the training shards are, and how to load an evaluation set.

  synthetic:    the embedded dataset (generated on first use into `config.data.cache_dir`)
  synthetic_long: the same images with their long, multi-sentence captions (retrieval and affinity only)
  synthetic_studio, synthetic_web, synthetic_sketch: the images of one source only, with their short captions;
                retrieval and affinity only (zero-shot, segmentation and compositionality per image would only
                split the pooled set's). Retrieval inside one domain is how ZeroVL evaluates (COCO, Flickr30k): a
                downstream set never asks a model to tell its training sources apart.
  array_record: shards in the vlp_jax record format (records.py) under `config.data.path`
  digits:       scikit-learn's bundled 8x8 handwritten digits (data/digits.py), offline; zero-shot and linear probe
  imagenet2012, cifar10, cifar100, caltech101, oxford_iiit_pet, oxford_flowers102, coco_captions: evaluation sets
                through tensorflow-datasets (data/tfds.py), prepared in `config.data.tfds_dir`
  sugarcrepe, winoground: the compositionality benchmarks from local files (data/compositional_sets.py)
"""
from __future__ import annotations

import dataclasses
import glob
import os

import ml_collections
import numpy as np

from vlp_jax.data import compositional_sets, digits, pipeline, records, synthetic
from vlp_jax.data import tfds as tfds_sets
from vlp_jax.evaluation import templates as templates_lib


class DataNotFoundError(FileNotFoundError):
  """No shards where the config says the data is; the message says how to prepare them."""


@dataclasses.dataclass
class EvalSet:
  """A held-out split.

  images: [N, S, S, 3] float32, normalised (an array, or a streamed.StreamedImages that decodes as it is read);
  labels: [N] int (-1 where unlabelled); captions: [T] strings with caption_image: [T] index of the image each
  caption describes.
  """
  name: str
  images: np.ndarray
  labels: np.ndarray
  class_names: tuple[str, ...]
  templates: tuple[str, ...]
  captions: list[str]
  caption_image: np.ndarray
  # Optional: masks [N, S, S] uint8 (0 = background, c + 1 = class c) for zero-shot segmentation;
  # canonical_captions [N] with hard_negatives [N] lists (swapped attributes / relations) for compositionality.
  masks: np.ndarray | None = None
  # Optional: train_images [N', S, S, 3] and train_labels [N']: a train split of the same dataset for the linear probe.
  train_images: np.ndarray | None = None
  train_labels: np.ndarray | None = None
  canonical_captions: list[str] | None = None
  hard_negatives: list[list[str]] | None = None
  # Optional: categories [N] (SugarCrepe's files) for per-category compositional accuracy; winoground_captions [N]
  # for Winoground (images and captions in groups of two, caption k of a group describing its image k).
  categories: list[str] | None = None
  winoground_captions: list[str] | None = None


def synthetic_spec(data: ml_collections.ConfigDict) -> synthetic.SyntheticSpec:
  s = data.synthetic
  return synthetic.SyntheticSpec(seed=s.seed, resolution=s.resolution, num_train=s.num_train, num_val=s.num_val,
                                 num_test=s.num_test, sources=tuple(s.sources), shards=s.shards,
                                 captions=s.captions)


def train_paths(data: ml_collections.ConfigDict) -> list[str]:
  """The ArrayRecord files to train on."""
  return split_paths(data, 'train')


def split_paths(data: ml_collections.ConfigDict, split: str) -> list[str]:
  """The ArrayRecord files of a split of the configured dataset (array_record data has only 'train')."""
  if data.name == 'synthetic':
    if split not in synthetic.SPLITS:
      raise ValueError(f"split '{split}' is not valid; valid choices: {list(synthetic.SPLITS)}")
    root = synthetic.ensure_dataset(synthetic_spec(data), data.cache_dir or None)
    return synthetic.shard_paths(root, split, tuple(data.synthetic.sources))
  if data.name == 'array_record':
    if split != 'train':
      raise ValueError(f"array_record data at config.data.path has only the 'train' split, not '{split}'")
    if not data.path.strip():
      raise DataNotFoundError('config.data.path is empty: this config trains on data you prepare yourself.\n'
                              + PREPARE_HELP)
    return [path for item in data.path.split(',') if item.strip() for path in source_paths(item.strip(), data)]
  raise ValueError(f"config.data.name='{data.name}' is not a known dataset; valid choices: {sorted(TRAIN_DATASETS)}")


PREPARE_HELP = (
    'Prepare the data first: convert your image-text pairs (a TSV/CSV of paths and captions, img2dataset webdataset '
    'tars, or a folder of images with a JSONL file) into ArrayRecord shards with\n'
    '  python -m vlp_jax.data.convert --format=webdataset --input=/data/cc3m_wds --output=/data/cc3m_shards\n'
    'then pass --config.data.path=/data/cc3m_shards (docs/data.md).')


def source_paths(item: str, data: ml_collections.ConfigDict) -> list[str]:
  """The training shards of one entry of config.data.path: a directory or glob of our shards, 'synthetic' (the
  embedded dataset's training shards) or 'tfds:NAME:SPLIT' (a prepared tfds split, written once as shards into the
  cache directory)."""
  if item == 'synthetic':
    root = synthetic.ensure_dataset(synthetic_spec(data), data.cache_dir or None)
    return synthetic.shard_paths(root, 'train', tuple(data.synthetic.sources))
  if item.startswith('tfds:'):
    name, _, split = item[len('tfds:'):].partition(':')
    return tfds_sets.training_shards(name, split or 'train', data.tfds_dir or None,
                                     data.cache_dir or synthetic.default_cache_dir())
  pattern = item if any(c in item for c in '*?[') else os.path.join(item, '*.array_record')
  paths = sorted(glob.glob(pattern))
  if not paths:
    raise DataNotFoundError(f"config.data.path entry '{item}' holds no ArrayRecord shards (looked for {pattern}).\n"
                            + PREPARE_HELP)
  return paths


TRAIN_DATASETS = ('synthetic', 'array_record')
SYNTHETIC_SOURCE_SETS = tuple(f'synthetic_{source}' for source in synthetic.SOURCES)
EVAL_DATASETS = ('synthetic', 'synthetic_long', *SYNTHETIC_SOURCE_SETS, digits.NAME, *tfds_sets.DATASETS, 'sugarcrepe', 'winoground')


def load_eval_sets(config: ml_collections.ConfigDict) -> list[EvalSet]:
  """Every set of `config.eval.datasets`, as the training loop and `vlp_jax.evaluate` evaluate them."""
  return [load_eval_set(name, config.data, config.eval.split, config.model.vision.image_size, config.eval.templates,
                        linear_probe='linear_probe' in config.eval.tasks)
          for name in config.eval.datasets]


def load_eval_set(name: str, data: ml_collections.ConfigDict, split: str, image_size: int,
                  templates: str = 'dataset', linear_probe: bool = False) -> EvalSet:
  """An evaluation split by dataset name, images preprocessed for the model's `image_size`.

  split: 'val' or 'test'. For the tfds sets 'test' is the dataset's evaluation split (ImageNet's validation set,
  the CIFAR test sets, COCO's Karpathy test split) and 'val' exists only for coco_captions.
  templates: the zero-shot prompt set (`config.eval.templates`): 'dataset' for the set's own, or a set name of
  evaluation/templates.py. Sets without class names get no templates.
  linear_probe: also load the train examples the linear probe fits on, where a set has them (the tfds class sets'
  train split, the first `data.probe_train_examples` of it or all with 0; digits always has its own).
  """
  prompts = templates_lib.templates_for(name, templates)  # before loading: a bad choice fails fast
  if name in tfds_sets.DATASETS:
    eval_set = tfds_sets.load_eval_set(name, None if split == 'test' else split, data.tfds_dir or None, image_size,
                                       max_examples=data.eval_max_examples or None,
                                       probe_train_examples=data.probe_train_examples if linear_probe else None)
    return dataclasses.replace(eval_set, templates=prompts if eval_set.class_names else ())
  if name == digits.NAME:
    return dataclasses.replace(digits.load_digits_eval_set(image_size, split), templates=prompts)
  if name == 'sugarcrepe':  # test-only benchmarks: the same set for either split
    return compositional_sets.sugarcrepe_eval_set(data.sugarcrepe_dir, data.sugarcrepe_images, image_size)
  if name == 'winoground':
    return compositional_sets.winoground_eval_set(data.winoground_dir, image_size)
  if name not in ('synthetic', 'synthetic_long', *SYNTHETIC_SOURCE_SETS):
    raise ValueError(f"eval dataset '{name}' is not known; valid choices: {list(EVAL_DATASETS)}")
  root = synthetic.ensure_dataset(synthetic_spec(data), data.cache_dir or None)
  sources = tuple(data.synthetic.sources)
  if name in SYNTHETIC_SOURCE_SETS:
    source = name[len('synthetic_'):]
    if source not in sources:
      raise ValueError(f"eval dataset '{name}' needs the source '{source}', but config.data.synthetic.sources is "
                       f'{sources}')
    sources = (source,)
  examples = pipeline.read_all(synthetic.shard_paths(root, split, sources))
  images = np.stack([_synthetic_image(e, image_size) for e in examples])
  if name != 'synthetic':  # the long captions or one source: retrieval and affinity consistency only
    field = 'long_caption' if name == 'synthetic_long' else 'caption'
    return EvalSet(name=name, images=images, labels=np.full(len(examples), -1), class_names=(), templates=(),
                   captions=[e[field] for e in examples], caption_image=np.arange(len(examples)))
  has_masks = bool(examples) and all('mask' in e for e in examples)
  has_negatives = bool(examples) and all('canonical_caption' in e for e in examples)
  train_images = train_labels = None
  if linear_probe:
    train = _balanced_train_examples(root, sources, data.probe_train_examples)
    train_images = np.stack([_synthetic_image(e, image_size) for e in train])
    train_labels = np.array([e['label'] for e in train])
  return EvalSet(name=name, images=images, labels=np.array([e['label'] for e in examples]),
                 class_names=synthetic.CLASS_NAMES, templates=prompts,
                 captions=[e['caption'] for e in examples], caption_image=np.arange(len(examples)),
                 masks=(np.stack([pipeline.resize_mask(records.decode_mask(e['mask']), image_size) for e in examples])
                        if has_masks else None),
                 train_images=train_images, train_labels=train_labels,
                 canonical_captions=[e['canonical_caption'] for e in examples] if has_negatives else None,
                 hard_negatives=[list(e['hard_negatives']) for e in examples] if has_negatives else None)


def _synthetic_image(example: dict, image_size: int) -> np.ndarray:
  """A record of the embedded dataset -> [S, S, 3] float32, resized and normalised as the eval images are."""
  return pipeline.normalize_image(pipeline.resize_image(records.decode_image(example['image']), image_size))


def _balanced_train_examples(root: str, sources: tuple[str, ...], count: int) -> list[dict]:
  """The linear probe's fitting set on the embedded dataset: the first count / len(sources) train examples of each
  source (count 0 = the whole train split), so that no source dominates."""
  per_source = -(-count // len(sources)) if count else None
  examples = []
  for source in sources:
    examples += pipeline.read_all(synthetic.shard_paths(root, 'train', (source,)))[:per_source]
  return examples
