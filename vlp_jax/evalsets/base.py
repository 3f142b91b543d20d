"""`EvalSet`, the held-out data every evaluator reads, and `EVAL_SETS`, the registry of loaders by name.

An eval set module registers a loader under each name it serves:

  @EVAL_SETS.register('digits')
  def load(name: str, request: LoadRequest) -> EvalSet: ...

and `config.eval.datasets` may then name it; the evaluators that apply are those whose needs the set has
(evaluation/base.py).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import ml_collections
import numpy as np

from vlp_jax.data.image import image_ops
from vlp_jax.registry import Registry


@dataclasses.dataclass
class EvalSet:
  """A held-out split.

  images: [N, S, S, 3] float32, normalised (an array, or a streamed.StreamedImages that decodes as it is read);
  labels: [N] int (-1 where unlabelled); class_names: [C] strings and templates: the set's own zero-shot prompts
  (format strings with one '{}'; `config.eval.templates` may replace them); captions: [T] strings with
  caption_image: [T] index of the image each caption describes.
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
  # Retrieval counts a caption with the same text as the image's own as a hit, both ways (evaluation/retrieval.py):
  # for sets whose captions repeat by construction (the embedded dataset's). False: exact matches, as CLIP_benchmark.
  identical_captions_match: bool = False
  # Optional: label_sets [N, K] int, every correct label of each image padded with -1 (ImageNet ReaL): zero-shot then
  # counts a prediction among them as a hit and leaves the images with none out (evaluation/zeroshot.py).
  label_sets: np.ndarray | None = None
  # Optional: regions [N] (records.Regions of each image: boxes as fractions of the side, descriptions) for referring
  # expressions (evaluation/referring.py), and train_regions [N'] of train_images for its box probe.
  regions: list | None = None
  train_regions: list | None = None


@dataclasses.dataclass(frozen=True)
class LoadRequest:
  """What a loader is asked for: `data` is config.data (directories, caps), `split` 'val' or 'test', images at
  `image_size` by the model's `preprocessing`, and the linear probe's train examples where the set has them when
  `linear_probe`."""
  data: ml_collections.ConfigDict
  split: str
  image_size: int
  linear_probe: bool = False
  preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING  # config.model.preprocess


EVAL_SETS: Registry[Callable[[str, LoadRequest], EvalSet]] = Registry('eval set', 'eval.datasets',
                                                                      package='vlp_jax.evalsets')
# For the sets that read files: (name, request) -> one line per input the set lacks, each naming its config key
# ([] when all are there); cheap (no image is read), so that a run lists them at start, before anything compiles.
EVAL_INPUTS: Registry[Callable[[str, LoadRequest], list[str]]] = Registry('eval set input check', 'eval.datasets',
                                                                          package='vlp_jax.evalsets')
