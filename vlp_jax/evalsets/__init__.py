"""Evaluation sets by name (`config.eval.datasets`): the embedded dataset's (synthetic.py), scikit-learn's digits,
tensorflow-datasets sets read without TensorFlow (tfds.py), Flickr30k from a local copy (flickr30k.py) and the
compositionality benchmarks (compositional.py).
Adding one is adding a module that registers a loader in `EVAL_SETS` (base.py)."""
from __future__ import annotations

import ml_collections

from vlp_jax.data.image import image_ops
from vlp_jax.evalsets.base import EVAL_INPUTS, EVAL_SETS, EvalSet, LoadRequest

# What the papers behind the full-scale configs report (configs/*_cc3m.py, ...): ImageNet zero-shot (and, where the
# paper has one, a linear probe on a capped part of its train split, config.data.probe_train_examples), COCO and
# Flickr30k retrieval on Karpathy's test splits. Read from config.data.tfds_dir and config.data.flickr30k_dir.
PAPER_EVAL_SETS = ('imagenet2012', 'coco_captions', 'flickr30k')


def load_eval_set(name: str, data: ml_collections.ConfigDict, split: str, image_size: int,
                  linear_probe: bool = False,
                  preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING) -> EvalSet:
  """An evaluation split by dataset name, images preprocessed for the model's `image_size` by its `preprocessing`
  (config.model.preprocess). split: 'val' or 'test'.
  linear_probe: also load the train examples the linear probe (and the referring-expression box probe) fits
  on, where a set has them."""
  return EVAL_SETS.get(name)(name, LoadRequest(data, split, image_size, linear_probe, preprocessing))


def load_request(config: ml_collections.ConfigDict) -> LoadRequest:
  """What the training loop and `vlp_jax.evaluate` ask every set of `config.eval.datasets` for."""
  return LoadRequest(config.data, config.eval.split, config.model.vision.image_size,
                     linear_probe=bool({'linear_probe', 'referring'} & set(config.eval.tasks)),
                     preprocessing=image_ops.preprocessing_of(config.model))


def load_eval_sets(config: ml_collections.ConfigDict) -> list[EvalSet]:
  """Every set of `config.eval.datasets`, as the training loop and `vlp_jax.evaluate` evaluate them."""
  request = load_request(config)
  return [EVAL_SETS.get(name)(name, request) for name in config.eval.datasets]


def missing_inputs(config: ml_collections.ConfigDict) -> list[str]:
  """One line per input that a set of `config.eval.datasets` would not find (a tfds split not prepared in
  config.data.tfds_dir, no Flickr30k folder at config.data.flickr30k_dir), each naming its key; nothing is loaded."""
  request = load_request(config)
  return [line for name in config.eval.datasets for line in EVAL_INPUTS.get(name, lambda *_: [])(name, request)]


__all__ = ['EVAL_INPUTS', 'EVAL_SETS', 'PAPER_EVAL_SETS', 'EvalSet', 'LoadRequest', 'load_eval_set', 'load_eval_sets',
           'load_request', 'missing_inputs']
