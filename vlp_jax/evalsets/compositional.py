"""The compositionality benchmarks of COSMOS as eval sets: SugarCrepe and Winoground, read from local files (no
download at run time). Images are decoded as the evaluators read them (streamed.StreamedImages).

  sugarcrepe: `config.data.sugarcrepe_dir` holds SugarCrepe's category files (add_att.json, replace_rel.json, ...:
              {id: {"filename", "caption", "negative_caption"}}), `config.data.sugarcrepe_images` the COCO val2017
              images they name. One eval set; `compositional_acc_<category>` per file.
  winoground: `config.data.winoground_dir` holds examples.jsonl (one group per line: "image_0", "image_1",
              "caption_0", "caption_1") and images/<image_k>.png, as the Hugging Face release has them.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from vlp_jax.data.image import image_ops
from vlp_jax.data.storage import records
from vlp_jax.errors import DataNotFoundError
from vlp_jax.evalsets.base import EVAL_SETS, EvalSet, LoadRequest
from vlp_jax.evalsets.streamed import StreamedImages

SUGARCREPE_HELP = (
    'SugarCrepe: put its category files (add_att.json, add_obj.json, replace_att.json, replace_obj.json, '
    'replace_rel.json, swap_att.json, swap_obj.json from github.com/RAIVNLab/sugar-crepe, data/) in one directory '
    'and the COCO val2017 images in another, then pass --config.data.sugarcrepe_dir=DIR '
    '--config.data.sugarcrepe_images=COCO_VAL2017_DIR.')
WINOGROUND_HELP = (
    'Winoground: download the dataset (huggingface.co/datasets/facebook/winoground: data/examples.jsonl and '
    'data/images.zip, unzipped to images/) into one directory and pass --config.data.winoground_dir=DIR.')


def _image_loader(paths: list[str], image_size: int,
                  preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING):
  def load(index: int) -> np.ndarray:
    with open(paths[index], 'rb') as f:
      return preprocessing(records.decode_image(f.read()), image_size)
  return load


def _missing(paths: list[str], help_text: str) -> None:
  absent = [p for p in dict.fromkeys(paths) if not os.path.exists(p)]
  if absent:
    raise DataNotFoundError(f'{len(absent)} image(s) missing, e.g. {absent[0]}.\n{help_text}')


def read_sugarcrepe(json_path: str) -> tuple[list[str], list[str], list[str]]:
  """One SugarCrepe category file -> (image file names, positive captions, negative captions), in file order."""
  with open(json_path, encoding='utf-8') as f:
    entries = list(json.load(f).values())
  try:
    return ([e['filename'] for e in entries], [e['caption'] for e in entries],
            [e['negative_caption'] for e in entries])
  except (KeyError, TypeError) as error:
    raise ValueError(f'{json_path} is not in the SugarCrepe format ({{id: {{"filename", "caption", '
                     f'"negative_caption"}}}}): {error!r}') from None


def sugarcrepe_eval_set(directory: str, image_dir: str, image_size: int,
                        preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING):
  """Every category file in `directory` as one EvalSet: canonical_captions the positives, hard_negatives one negative
  each, categories the file names without .json."""
  files = sorted(glob.glob(os.path.join(directory, '*.json'))) if directory else []
  if not files:
    raise DataNotFoundError(f"no SugarCrepe files in config.data.sugarcrepe_dir='{directory}'.\n{SUGARCREPE_HELP}")
  filenames, positives, negatives, categories = [], [], [], []
  for path in files:
    names, pos, neg = read_sugarcrepe(path)
    filenames += names
    positives += pos
    negatives += neg
    categories += [os.path.splitext(os.path.basename(path))[0]] * len(names)
  paths = [os.path.join(image_dir, name) for name in filenames]
  _missing(paths, SUGARCREPE_HELP)
  return EvalSet(name='sugarcrepe', images=StreamedImages(_image_loader(paths, image_size, preprocessing), len(paths),
                                                          image_size),
                 labels=np.full(len(paths), -1), class_names=(), templates=(), captions=[],
                 caption_image=np.zeros(0, np.int64), canonical_captions=positives,
                 hard_negatives=[[n] for n in negatives], categories=categories)


def winoground_eval_set(directory: str, image_size: int,
                        preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING):
  """Winoground's groups as one EvalSet: images [2G] (image k of group g at 2g + k) and winoground_captions [2G]
  (caption k of group g at 2g + k; caption k describes image k)."""
  examples_path = os.path.join(directory, 'examples.jsonl') if directory else ''
  if not os.path.exists(examples_path):
    raise DataNotFoundError(f"no examples.jsonl in config.data.winoground_dir='{directory}'.\n{WINOGROUND_HELP}")
  with open(examples_path, encoding='utf-8') as f:
    groups = [json.loads(line) for line in f if line.strip()]
  paths, captions = [], []
  for group in groups:
    for k in (0, 1):
      name = group[f'image_{k}']
      paths.append(os.path.join(directory, 'images', name if os.path.splitext(name)[1] else f'{name}.png'))
      captions.append(group[f'caption_{k}'])
  _missing(paths, WINOGROUND_HELP)
  return EvalSet(name='winoground', images=StreamedImages(_image_loader(paths, image_size, preprocessing), len(paths),
                                                          image_size),
                 labels=np.full(len(paths), -1), class_names=(), templates=(), captions=[],
                 caption_image=np.zeros(0, np.int64), winoground_captions=captions)


@EVAL_SETS.register('sugarcrepe')
def load_sugarcrepe(name: str, request: LoadRequest) -> EvalSet:
  """A test-only benchmark: the same set for either split."""
  del name
  return sugarcrepe_eval_set(request.data.sugarcrepe_dir, request.data.sugarcrepe_images, request.image_size,
                             request.preprocessing)


@EVAL_SETS.register('winoground')
def load_winoground(name: str, request: LoadRequest) -> EvalSet:
  """A test-only benchmark: the same set for either split."""
  del name
  return winoground_eval_set(request.data.winoground_dir, request.image_size, request.preprocessing)
