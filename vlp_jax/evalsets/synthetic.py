"""The embedded dataset's held-out splits as eval sets.

  synthetic:       images, short captions, class labels (zero-shot, linear probe), masks (segmentation) and hard
                   negatives (compositionality)
  synthetic_long:  the same images with their long, multi-sentence captions (retrieval and affinity only)
  synthetic_studio, synthetic_web, synthetic_sketch: the images of one source only, with their short captions;
                   retrieval and affinity only (zero-shot, segmentation and compositionality per image would only
                   split the pooled set's). Retrieval inside one domain is how ZeroVL evaluates (COCO, Flickr30k):
                   a downstream set never asks a model to tell its training sources apart.
  synthetic_novel, synthetic_long_novel: `synthetic` and `synthetic_long` restricted to the held-out examples that
                   share neither their exact short caption nor their scene layout (data/sources/synthetic_shapes.py
                   `scene_layout`: the same objects with the same colours, shapes, sizes and grid cells) with any train
                   example of the configured sources (`novel_subset`): what a model gets right there it did not recall
                   from training as a whole. Every task of the unrestricted set applies; the linear probe fits on the
                   same train examples. The subset's size is printed when it is first computed.

Every one of them scores retrieval with identical caption texts as one another's match
(`EvalSet.identical_captions_match`, evaluation/retrieval.py): captions repeat by construction (the test split's 1500
short captions hold 952 texts), and under exact matching a repeated caption ties with its copies and caps R@1 for
every method alike.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from vlp_jax.data.image import image_ops
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.evalsets.base import EVAL_SETS, EvalSet, LoadRequest
from vlp_jax.evalsets.prompts import SYNTHETIC_TEMPLATES

SOURCE_SETS = tuple(f'synthetic_{source}' for source in synthetic.SOURCES)
NOVEL_SUFFIX = '_novel'
NOVEL_SETS = ('synthetic_novel', 'synthetic_long_novel')


@dataclasses.dataclass(frozen=True)
class NovelSubset:
  """The held-out examples of a split that share neither a short caption nor a layout with the train split.

  keys: the subset's record keys (data/sources/synthetic_shapes.py `example_key`); total: the split's examples over the
  spec's sources; caption_seen / layout_seen: the fractions of all of them whose short caption occurs verbatim in the
  train split / whose layout equals a train example's."""
  keys: frozenset[str]
  total: int
  caption_seen: float
  layout_seen: float

  def summary(self, split: str) -> str:
    return (f'{len(self.keys)} of {self.total} {split} examples share neither a short caption nor a layout with the '
            f'train split ({self.caption_seen:.1%} repeat a train caption, {self.layout_seen:.1%} a train layout)')


@functools.lru_cache(maxsize=8)
def novel_subset(spec: synthetic.SyntheticSpec, split: str, cache_dir: str | None = None) -> NovelSubset:
  """The `NovelSubset` of `split` ('val' or 'test') of the embedded dataset `spec`, generated into `cache_dir` on
  first use: captions read from its records, layouts drawn without rendering (`synthetic.split_layouts`, a few
  seconds for 30,000 train examples, so computed once per process and not stored). Printed once when computed."""
  if split == 'train':
    raise ValueError("the novel subset is of a held-out split; valid choices: 'val', 'test'")
  root = synthetic.ensure_dataset(spec, cache_dir)
  train = pipeline.read_all(synthetic.shard_paths(root, 'train', spec.sources))
  held_out = pipeline.read_all(synthetic.shard_paths(root, split, spec.sources))
  train_layouts, layouts = synthetic.split_layouts(spec, 'train'), synthetic.split_layouts(spec, split)
  caption_seen, layout_seen = synthetic.seen_in_train(
      [e['caption'] for e in train], list(train_layouts.values()),
      [e['caption'] for e in held_out], [layouts[e['key']] for e in held_out])
  novel = ~(caption_seen | layout_seen)
  subset = NovelSubset(keys=frozenset(e['key'] for e, keep in zip(held_out, novel) if keep), total=len(held_out),
                       caption_seen=float(caption_seen.mean()) if len(held_out) else 0.0,
                       layout_seen=float(layout_seen.mean()) if len(held_out) else 0.0)
  print(f'synthetic novel subset: {subset.summary(split)}', flush=True)
  return subset


def _image(example: dict, image_size: int, preprocessing: image_ops.ImagePreprocessing) -> np.ndarray:
  """A record of the embedded dataset -> [S, S, 3] float32, resized and normalised by the model's preprocessing."""
  return preprocessing(records.decode_image(example['image']), image_size)


def _balanced_train_examples(root: str, sources: tuple[str, ...], count: int) -> list[dict]:
  """The linear probe's fitting set on the embedded dataset: the first count / len(sources) train examples of each
  source (count 0 = the whole train split), so that no source dominates."""
  per_source = -(-count // len(sources)) if count else None
  examples = []
  for source in sources:
    examples += pipeline.read_all(synthetic.shard_paths(root, 'train', (source,)))[:per_source]
  return examples


def _sources(name: str, configured: tuple[str, ...]) -> tuple[str, ...]:
  if name not in SOURCE_SETS:
    return configured
  source = name[len('synthetic_'):]
  if source not in configured:
    raise ValueError(f"eval dataset '{name}' needs the source '{source}', but config.data.synthetic.sources is "
                     f'{configured}')
  return (source,)


@EVAL_SETS.register('synthetic')
@EVAL_SETS.register('synthetic_long')
def load(name: str, request: LoadRequest) -> EvalSet:
  data, image_size = request.data, request.image_size
  spec = synthetic.spec_from_config(data)
  root = synthetic.ensure_dataset(spec, data.cache_dir or None)
  base = name.removesuffix(NOVEL_SUFFIX)  # a novel set is its base set with fewer held-out examples
  sources = _sources(base, tuple(data.synthetic.sources))
  examples = pipeline.read_all(synthetic.shard_paths(root, request.split, sources))
  if base != name:
    keys = novel_subset(spec, request.split, data.cache_dir or None).keys
    examples = [e for e in examples if e['key'] in keys]
    if not examples:
      raise ValueError(f"eval dataset '{name}' is empty: every {request.split} example shares a short caption or a "
                       'layout with the train split; hold out more (config.data.synthetic.num_val / num_test)')
  images = np.stack([_image(e, image_size, request.preprocessing) for e in examples])
  if base != 'synthetic':  # the long captions or one source: retrieval and affinity consistency only
    field = 'long_caption' if base == 'synthetic_long' else 'caption'
    return EvalSet(name=name, images=images, labels=np.full(len(examples), -1), class_names=(), templates=(),
                   captions=[e[field] for e in examples], caption_image=np.arange(len(examples)),
                   identical_captions_match=True)
  has_masks = bool(examples) and all('mask' in e for e in examples)
  has_negatives = bool(examples) and all('canonical_caption' in e for e in examples)
  has_regions = bool(examples) and all('regions' in e for e in examples)  # config.data.synthetic.regions
  train_images = train_labels = train_regions = None
  if request.linear_probe:
    train = _balanced_train_examples(root, sources, data.probe_train_examples)
    train_images = np.stack([_image(e, image_size, request.preprocessing) for e in train])
    train_labels = np.array([e['label'] for e in train])
    train_regions = [records.decode_regions(e['regions']) for e in train] if has_regions else None
  return EvalSet(name=name, images=images, labels=np.array([e['label'] for e in examples]),
                 class_names=synthetic.CLASS_NAMES, templates=SYNTHETIC_TEMPLATES,
                 captions=[e['caption'] for e in examples], caption_image=np.arange(len(examples)),
                 masks=(np.stack([request.preprocessing.resize_mask(records.decode_mask(e['mask']), image_size)
                                  for e in examples]) if has_masks else None),
                 train_images=train_images, train_labels=train_labels,
                 canonical_captions=[e['canonical_caption'] for e in examples] if has_negatives else None,
                 hard_negatives=[list(e['hard_negatives']) for e in examples] if has_negatives else None,
                 regions=[records.decode_regions(e['regions']) for e in examples] if has_regions else None,
                 train_regions=train_regions, identical_captions_match=True)


for _name in SOURCE_SETS + NOVEL_SETS:
  EVAL_SETS.add(_name, load)
