"""The files other libraries' own loaders need beside exported weights, as pure functions of our configs: a
transformers folder's tokenizer and preprocessor files (so that `CLIPProcessor.from_pretrained(folder)` works) and an
open_clip model config (so that `open_clip.create_model` builds a model of any shape). Writing them is
vlp_jax/interchange.py's job."""
from __future__ import annotations

import json
from typing import Sequence

import ml_collections

from vlp_jax.data.image.image_ops import RESAMPLING, ImagePreprocessing, preprocessing_of
from vlp_jax.models.interchange.files import WeightsError

# transformers' names of CLIP's two special tokens (our vocabulary calls them <start_of_text> / <end_of_text>).
HF_SOT, HF_EOT = '<|startoftext|>', '<|endoftext|>'
# SiglipTokenizer's special tokens: '</s>' ends and pads every row.
_SIGLIP_SPECIALS = {'eos_token': '</s>', 'unk_token': '<unk>', 'pad_token': '</s>'}


def _json(value: dict) -> str:
  return json.dumps(value, indent=2, ensure_ascii=False) + '\n'


def clip_tokenizer_files(symbols: Sequence[str], merges: Sequence[tuple[str, str]], context_length: int
                         ) -> dict[str, str]:
  """transformers' CLIPTokenizer files for our CLIP BPE: {file name: text}.

  symbols: the symbol of each id (the last two are the start and end of text); merges: the BPE merges by rank
  (`data.text.clip_bpe.Tokenizer.vocabulary`). Rows are cut at `context_length` ids (model_max_length). transformers
  pads with the end-of-text token where ours pads with id 0: every id up to the end of text is the same, and the
  text tower, causal and pooled at the first end of text, gives the same embedding. (Padding with id 0, the symbol
  '!', would make transformers treat every '!' in a caption as the padding token.)
  """
  vocab = {symbol: i for i, symbol in enumerate([*symbols[:-2], HF_SOT, HF_EOT])}
  specials = {'bos_token': HF_SOT, 'eos_token': HF_EOT, 'unk_token': HF_EOT, 'pad_token': HF_EOT}
  config = {'tokenizer_class': 'CLIPTokenizer', 'model_max_length': context_length, 'add_prefix_space': False,
            'do_lower_case': True, 'clean_up_tokenization_spaces': False, **specials}
  return {'vocab.json': _json(vocab), 'merges.txt': '#version: 0.2\n' + ''.join(f'{a} {b}\n' for a, b in merges),
          'tokenizer_config.json': _json(config), 'special_tokens_map.json': _json(specials)}


def siglip_tokenizer_files(context_length: int) -> dict[str, str]:
  """transformers' SiglipTokenizer config files for a `spiece.model` written beside them: {file name: text}."""
  config = {'tokenizer_class': 'SiglipTokenizer', 'model_max_length': context_length, 'do_lower_case': True,
            **_SIGLIP_SPECIALS}
  return {'tokenizer_config.json': _json(config), 'special_tokens_map.json': _json(_SIGLIP_SPECIALS)}


# PIL's resampling filters by the numbers transformers' configs store them as.
_HF_RESAMPLE = {int(RESAMPLING[name]): name for name in RESAMPLING}


def preprocessor_config(model_config: ml_collections.ConfigDict) -> dict:
  """A transformers image processor config (preprocessor_config.json) that preprocesses as the model's evaluation
  does (inference.preprocess_image, config.model.preprocess): RGB, the family's resize (the shorter side then a
  centre crop, or both sides: SigLIP's squash) with its filter, /255, then (x - mean) / std. transformers' PIL
  processors start an odd centre crop half a pixel earlier than torchvision (`crop_offset='round'`), which a
  config cannot say."""
  kind = 'Siglip' if model_config.vision.type == 'siglip_vit' else 'CLIP'
  preprocessing, image_size = preprocessing_of(model_config), model_config.vision.image_size
  if model_config.vision.get('naflex', False):
    return naflex_preprocessor_config(model_config)
  square = {'height': image_size, 'width': image_size}
  geometry = ({'size': square, 'do_center_crop': False} if preprocessing.resize == 'squash' else
              {'size': {'shortest_edge': image_size}, 'do_center_crop': True, 'crop_size': square})
  return {'image_processor_type': f'{kind}ImageProcessor', 'processor_class': f'{kind}Processor',
          'do_convert_rgb': True, 'do_resize': True, **geometry,
          'resample': int(RESAMPLING[preprocessing.resample]), 'do_rescale': True, 'rescale_factor': 1 / 255,
          'do_normalize': True, 'image_mean': [float(x) for x in preprocessing.mean],
          'image_std': [float(x) for x in preprocessing.std]}


def naflex_preprocessor_config(model_config: ml_collections.ConfigDict) -> dict:
  """transformers' Siglip2ImageProcessor config for a NaFlex model: its patch size, its patch budget
  (`vision.max_patches`), and the filter, mean and std of its preprocessing (data/image/naflex_patches.py's rule is that
  processor's)."""
  preprocessing = preprocessing_of(model_config)
  return {'image_processor_type': 'Siglip2ImageProcessor', 'processor_class': 'Siglip2Processor',
          'do_convert_rgb': True, 'do_resize': True, 'resample': int(RESAMPLING[preprocessing.resample]),
          'do_rescale': True, 'rescale_factor': 1 / 255, 'do_normalize': True,
          'image_mean': [float(x) for x in preprocessing.mean], 'image_std': [float(x) for x in preprocessing.std],
          'patch_size': model_config.vision.patch_size,
          'max_num_patches': model_config.vision.get('max_patches', 256)}


def naflex_preprocessing_from_hf(processor: dict, path: str, patch_size: int, default: ImagePreprocessing
                                 ) -> tuple[ImagePreprocessing, int]:
  """(the preprocessing, the patch budget) a transformers Siglip2ImageProcessor config (`processor`, read from
  `path`) describes for a model of `patch_size` patches; fields it leaves out take `default` and transformers'
  default budget (256). WeightsError naming the field for what vlp_jax cannot do."""
  if processor.get('patch_size', patch_size) != patch_size:
    raise WeightsError(f'{path}: patch_size={processor["patch_size"]!r} differs from the patch size of the model, '
                       f'{patch_size}')
  budget = processor.get('max_num_patches', 256)
  if not isinstance(budget, int) or budget < 1:
    raise WeightsError(f'{path}: max_num_patches={budget!r} must be a positive integer')
  if not processor.get('do_resize', True):
    raise WeightsError(f'{path}: do_resize=false; NaFlex preprocessing always resizes to its patch grid')
  # The pixel fields are those of a fixed-size processor; the geometry is NaFlex's own.
  fixed = preprocessing_from_hf({k: v for k, v in processor.items() if k not in ('size', 'crop_size')}, path, 1,
                                default)
  return fixed, budget


def _hf_geometry(processor: dict, path: str, image_size: int, default: str) -> str:
  """The `RESIZE_MODES` entry of a transformers processor config whose output is image_size x image_size;
  WeightsError naming the fields otherwise."""
  size, crop = processor.get('size'), processor.get('crop_size')
  size = {'shortest_edge': size} if isinstance(size, int) else (size or {})
  crop = {'height': crop, 'width': crop} if isinstance(crop, int) else (crop or {})
  square = {'height': image_size, 'width': image_size}
  if 'shortest_edge' in size:
    if size['shortest_edge'] == image_size and processor.get('do_center_crop', True) and crop in ({}, square):
      return 'shorter_side_crop'
  elif 'height' in size or 'width' in size:
    if size == square and (not processor.get('do_center_crop', False) or crop in ({}, square)):
      return 'squash'
  else:
    return default
  raise WeightsError(f'{path}: size={processor.get("size")!r}, do_center_crop={processor.get("do_center_crop")!r}, '
                     f'crop_size={processor.get("crop_size")!r}: vlp_jax resizes to the model\'s {image_size} x '
                     f'{image_size} in one step, either the shorter side to {image_size} and a centre crop of '
                     f'{image_size}, or both sides to {image_size}. Edit the file to one of those (or move it away to '
                     'import with the model family\'s own preprocessing)')


def preprocessing_from_hf(processor: dict, path: str, image_size: int, default: ImagePreprocessing
                          ) -> ImagePreprocessing:
  """The `ImagePreprocessing` a transformers preprocessor_config.json (`processor`, read from `path`) of a model
  taking image_size x image_size images describes; fields it leaves out take the model family's `default`
  (transformers' own defaults for CLIP and SigLIP). WeightsError naming the field for what vlp_jax's preprocessing
  cannot do."""
  resize = _hf_geometry(processor, path, image_size, default.resize)
  resample = processor.get('resample', int(RESAMPLING[default.resample]))
  if resample not in _HF_RESAMPLE:
    raise WeightsError(f'{path}: resample={resample!r} is not valid; valid choices: {sorted(_HF_RESAMPLE)} '
                       f'({", ".join(f"{k}: {v}" for k, v in sorted(_HF_RESAMPLE.items()))})')
  if not processor.get('do_rescale', True) or abs(processor.get('rescale_factor', 1 / 255) - 1 / 255) > 1e-12:
    raise WeightsError(f'{path}: do_rescale={processor.get("do_rescale")!r}, rescale_factor='
                       f'{processor.get("rescale_factor")!r}; vlp_jax scales pixels by 1/255 before normalising')
  mean, std = processor.get('image_mean', default.mean), processor.get('image_std', default.std)
  if not processor.get('do_normalize', True):
    mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
  return ImagePreprocessing(resize=resize, resample=_HF_RESAMPLE[resample], crop_offset='floor',
                            mean=tuple(float(x) for x in mean), std=tuple(float(x) for x in std))


def open_clip_preprocess_arguments(model_config: ml_collections.ConfigDict | dict) -> dict:
  """The keyword arguments of `open_clip.create_model_and_transforms` that give the model's preprocessing
  (open_clip reads none of it from a weights file). Those of `{}` (OpenAI CLIP's) are open_clip's defaults."""
  preprocessing = preprocessing_of(model_config)
  return {'image_mean': tuple(preprocessing.mean), 'image_std': tuple(preprocessing.std),
          'image_interpolation': preprocessing.resample,
          'image_resize_mode': 'squash' if preprocessing.resize == 'squash' else 'shortest'}


def open_clip_config_problem(model_config: ml_collections.ConfigDict) -> str | None:
  """Why open_clip's model config format cannot describe `model_config`, or None when it can."""
  if model_config.vision.type == 'siglip_vit':
    return ("open_clip builds SigLIP image towers from timm models named by size, which a config file cannot "
            "describe for any shape; a preset with open_clip's name (e.g. ViT-B-16-SigLIP) loads with open_clip's own "
            "config of that name")
  if model_config.vision.type not in ('vit', 'resnet'):
    return f'open_clip has no image tower of type {model_config.vision.type!r}'
  for spec in (model_config.vision, model_config.text):
    mlp_width = spec.get('mlp_width', 0)
    if mlp_width and int(spec.width * (mlp_width / spec.width)) != mlp_width:
      return f'open_clip cannot give an MLP width of {mlp_width} to a width of {spec.width} (its mlp_ratio)'
  return None


def _tower_options(spec: ml_collections.ConfigDict, act: str) -> dict:
  """The options open_clip's tower configs share: MLP width (as a ratio), LayerNorm epsilon, tanh GELU."""
  out = {}
  if spec.get('mlp_width', 0):
    out['mlp_ratio'] = spec.mlp_width / spec.width
  if spec.get('ln_eps', 1e-5) != 1e-5:
    out['norm_kwargs'] = {'eps': spec.ln_eps}
  if act == 'gelu_tanh':
    out['act_kwargs'] = {'approximate': 'tanh'}
  return out


def open_clip_model_config(model_config: ml_collections.ConfigDict) -> dict:
  """open_clip's model config (a model_configs/*.json: embed_dim, vision_cfg, text_cfg, quick_gelu) of a CLIP model
  (ViT or ResNet image tower); check `open_clip_config_problem` first."""
  v, t, act = model_config.vision, model_config.text, model_config.act
  if v.type == 'resnet':  # open_clip's heads are width * 32 // head_width
    vision = {'image_size': v.image_size, 'layers': list(v.stages), 'width': v.width,
              'head_width': v.width * 32 // v.heads, 'patch_size': None}
  else:
    vision = {'image_size': v.image_size, 'layers': v.layers, 'width': v.width, 'head_width': v.width // v.heads,
              'patch_size': v.patch_size, **_tower_options(v, act)}
  text = {'context_length': t.context_length, 'vocab_size': t.vocab_size, 'width': t.width, 'heads': t.heads,
          'layers': t.layers, 'pool_type': 'argmax' if t.pool == 'eot' else t.pool,
          'no_causal_mask': not t.causal, 'proj_bias': bool(t.proj_bias), **_tower_options(t, act)}
  out = {'embed_dim': model_config.embed_dim, 'quick_gelu': act == 'quick_gelu', 'vision_cfg': vision,
         'text_cfg': text}
  if model_config.get('init_logit_bias') is not None:
    out['init_logit_bias'] = model_config.init_logit_bias
  return out
