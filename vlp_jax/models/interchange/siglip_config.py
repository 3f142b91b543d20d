"""transformers' `SiglipConfig` (a SiglipModel's config.json) <-> our model config: the model a file describes,
the config.json an export writes, and the fields on which two SigLIP model configs differ. SigLIP 2's fixed-resolution
checkpoints are SiglipModels too; only their tokenizer (Gemma's, 256k ids) tells them apart. SigLIP 2's NaFlex
checkpoints are `Siglip2Model`s (`Siglip2Config`, model_type 'siglip2'): the same towers, with the patch grid given as
`num_patches` instead of an image size, imported as a siglip_vit model with `vision.naflex=True`."""
from __future__ import annotations

import json
import math
from typing import Any

import ml_collections

from vlp_jax import models
from vlp_jax.data.image.image_ops import SIGLIP2_NAFLEX_PREPROCESSING
from vlp_jax.data.text.tokenizer_factory import GEMMA, SENTENCEPIECE
from vlp_jax.models.interchange.files import WeightsError

# transformers' activation names <-> ours (its 'gelu' is the exact GELU, as ours).
_HF_ACTS = {'gelu_pytorch_tanh': 'gelu_tanh', 'gelu_new': 'gelu_tanh', 'gelu': 'gelu', 'quick_gelu': 'quick_gelu'}
_ACTS_TO_HF = {'gelu_tanh': 'gelu_pytorch_tanh', 'gelu': 'gelu', 'quick_gelu': 'quick_gelu'}  # what exports write
# transformers' SiglipTextConfig / SiglipVisionConfig defaults, for the fields a config.json leaves out.
HF_SIGLIP_DEFAULTS = {
    'text_config': {'vocab_size': 32000, 'hidden_size': 768, 'intermediate_size': 3072, 'num_hidden_layers': 12,
                    'num_attention_heads': 12, 'max_position_embeddings': 64, 'hidden_act': 'gelu_pytorch_tanh',
                    'layer_norm_eps': 1e-6, 'projection_size': None},
    'vision_config': {'hidden_size': 768, 'intermediate_size': 3072, 'num_hidden_layers': 12,
                      'num_attention_heads': 12, 'image_size': 224, 'patch_size': 16,
                      'hidden_act': 'gelu_pytorch_tanh', 'layer_norm_eps': 1e-6, 'vision_use_head': True},
}


# SigLIP 2's tokenizer: transformers' classes for Gemma's vocabulary, and that vocabulary's size (SigLIP's own are
# 32000 and 250000), which decides for a folder without a tokenizer_config.json.
_GEMMA_TOKENIZER_CLASSES = ('GemmaTokenizer', 'GemmaTokenizerFast', 'Siglip2Tokenizer')
GEMMA_VOCAB_SIZE = 256_000


def siglip_tokenizer(hf: dict, tokenizer_config: dict | None) -> str:
  """`config.model.text.tokenizer` of a SiglipModel: 'gemma' (SigLIP 2) when its tokenizer_config.json names a Gemma
  tokenizer class, or, without one, when its vocabulary is Gemma's size; else 'sentencepiece' (SigLIP)."""
  if tokenizer_config and tokenizer_config.get('tokenizer_class'):
    return GEMMA if tokenizer_config['tokenizer_class'] in _GEMMA_TOKENIZER_CLASSES else SENTENCEPIECE
  return GEMMA if _siglip_value(hf, 'text_config', 'vocab_size') == GEMMA_VOCAB_SIZE else SENTENCEPIECE


def siglip2_tokenizer_files(context_length: int) -> dict[str, str]:
  """transformers' tokenizer config files for SigLIP 2's Gemma `tokenizer.model` written beside them: a
  GemmaTokenizer with no start token, an EOS ending every row and right padding with '<pad>', as big_vision's
  SigLIP 2 demo tokenises. GemmaTokenizer does not lowercase: lowercase captions first, or load the folder with
  transformers' Siglip2Tokenizer, which does."""
  specials = {'bos_token': '<bos>', 'eos_token': '<eos>', 'unk_token': '<unk>', 'pad_token': '<pad>'}
  config = {'tokenizer_class': 'GemmaTokenizer', 'model_max_length': context_length, 'add_bos_token': False,
            'add_eos_token': True, 'padding_side': 'right', **specials}
  return {name: json.dumps(value, indent=2) + '\n'
          for name, value in (('tokenizer_config.json', config), ('special_tokens_map.json', specials))}


def _siglip_value(hf: dict, section: str, key: str) -> Any:
  return (hf.get(section) or {}).get(key, HF_SIGLIP_DEFAULTS[section][key])


def siglip_model_config(hf: dict, tokenizer_config: dict | None = None) -> ml_collections.ConfigDict:
  """The model config a transformers SiglipConfig dict describes: a SigLIP preset's (the one it matches, else
  ViT-B-16-SigLIP's, named 'hf-siglip', or 'hf-siglip2' for SigLIP 2) with every size read from the file and the
  tokenizer `siglip_tokenizer` gives for it and its folder's tokenizer_config.json (`tokenizer_config`)."""
  def tower(section: str) -> dict:
    width = _siglip_value(hf, section, 'hidden_size')
    hidden = _siglip_value(hf, section, 'intermediate_size')
    return dict(width=width, layers=_siglip_value(hf, section, 'num_hidden_layers'),
                heads=_siglip_value(hf, section, 'num_attention_heads'),
                mlp_width=0 if hidden == 4 * width else hidden, ln_eps=_siglip_value(hf, section, 'layer_norm_eps'))
  for section in ('vision_config', 'text_config'):
    act = _siglip_value(hf, section, 'hidden_act')
    if act not in _HF_ACTS:
      raise WeightsError(f'{section}.hidden_act={act!r} has no vlp_jax equivalent; valid choices: {list(_HF_ACTS)}')
  if not _siglip_value(hf, 'vision_config', 'vision_use_head'):
    raise WeightsError('vision_config.vision_use_head=false: vlp_jax needs the attention-pooling head that gives '
                       'SigLIP its image embedding')
  acts = {_HF_ACTS[_siglip_value(hf, s, 'hidden_act')] for s in ('vision_config', 'text_config')}
  if len(acts) > 1:
    raise WeightsError(f'the towers use different activations {sorted(acts)}; vlp_jax models share one')
  vision, text = tower('vision_config'), tower('text_config')
  projection = _siglip_value(hf, 'text_config', 'projection_size') or text['width']
  if projection != vision['width']:
    raise WeightsError(f'text_config.projection_size={projection} differs from vision_config.hidden_size='
                       f'{vision["width"]}: the joint space of a SigLIP model is the image tower\'s width')
  config = models.preset('ViT-B-16-SigLIP')
  config.act = acts.pop()
  config.embed_dim = vision['width']
  config.vision.update(vision, image_size=_siglip_value(hf, 'vision_config', 'image_size'),
                       patch_size=_siglip_value(hf, 'vision_config', 'patch_size'))
  config.text.update(text, context_length=_siglip_value(hf, 'text_config', 'max_position_embeddings'),
                     vocab_size=_siglip_value(hf, 'text_config', 'vocab_size'))
  config.text.tokenizer = siglip_tokenizer(hf, tokenizer_config)
  config.name = next((name for name in sorted(models.PRESETS) if 'SigLIP' in name
                      and not siglip_mismatches(config, models.preset(name))),
                     'hf-siglip2' if config.text.tokenizer == GEMMA else 'hf-siglip')
  return config


_SIGLIP_FIELDS = ('act', 'embed_dim', *(f'vision.{k}' for k in ('image_size', 'patch_size', 'width', 'layers', 'heads',
                                                                 'mlp_width', 'ln_eps')),
                  *(f'text.{k}' for k in ('context_length', 'vocab_size', 'width', 'layers', 'heads', 'mlp_width',
                                          'ln_eps', 'tokenizer')))


def siglip_mismatches(got: ml_collections.ConfigDict, want: ml_collections.ConfigDict) -> list[tuple[str, Any, Any]]:
  """[(field, got, want)] for every SigLIP size or option on which two model configs differ."""
  out = []
  for field in _SIGLIP_FIELDS:
    a, b = got, want
    for part in field.split('.'):
      a, b = a[part], b[part]
    if a != b:
      out.append((field, a, b))
  return out


# transformers' Siglip2VisionConfig default for the learned position grid's size (16 x 16), and its image processor's
# default patch budget.
HF_SIGLIP2_NUM_PATCHES = 256
HF_SIGLIP2_MAX_NUM_PATCHES = 256


def siglip2_model_config(hf: dict, tokenizer_config: dict | None = None,
                         max_patches: int = HF_SIGLIP2_MAX_NUM_PATCHES) -> ml_collections.ConfigDict:
  """The model config a transformers Siglip2Config dict (a NaFlex Siglip2Model's config.json) describes: as
  `siglip_model_config`, the image size the side of the position grid (sqrt(num_patches)) times the patch size,
  `vision.naflex=True` and `vision.max_patches` (the patch budget of its image processor), named 'hf-siglip2-naflex'."""
  vision = hf.get('vision_config') or {}
  num_patches, patch_size = vision.get('num_patches', HF_SIGLIP2_NUM_PATCHES), vision.get('patch_size', 16)
  grid = math.isqrt(num_patches) if isinstance(num_patches, int) and num_patches > 0 else 0
  if grid * grid != num_patches:
    raise WeightsError(f'vision_config.num_patches={num_patches!r} is not a square: vlp_jax keeps the learned '
                       'position embedding as a square grid')
  if not isinstance(patch_size, int):
    raise WeightsError(f'vision_config.patch_size={patch_size!r}: vlp_jax takes square patches, one integer')
  config = siglip_model_config({**hf, 'vision_config': {**vision, 'image_size': grid * patch_size}}, tokenizer_config)
  config.vision.update(naflex=True, max_patches=max_patches)
  config.preprocess = SIGLIP2_NAFLEX_PREPROCESSING.config()  # Siglip2ImageProcessor's defaults
  config.name = 'hf-siglip2-naflex'
  return config


def hf_siglip2_config(model_config: ml_collections.ConfigDict) -> dict:
  """A transformers Siglip2Config (as JSON) describing a SigLIP `model_config` (a NaFlex model's, or a fixed one's:
  the towers are the same)."""
  siglip = hf_siglip_config(model_config)
  vision = {k: v for k, v in siglip['vision_config'].items() if k != 'image_size'}
  grid = model_config.vision.image_size // model_config.vision.patch_size
  return {'architectures': ['Siglip2Model'], 'model_type': 'siglip2',
          'text_config': {**siglip['text_config'], 'model_type': 'siglip2_text_model'},
          'vision_config': {**vision, 'model_type': 'siglip2_vision_model', 'num_patches': grid * grid}}


def hf_siglip_config(model_config: ml_collections.ConfigDict) -> dict:
  """A transformers SiglipConfig (as JSON) describing a SigLIP `model_config`."""
  v, t = model_config.vision, model_config.text
  act = _ACTS_TO_HF[model_config.act]

  def tower(spec) -> dict:
    return {'hidden_size': spec.width, 'intermediate_size': spec.mlp_width or 4 * spec.width,
            'num_hidden_layers': spec.layers, 'num_attention_heads': spec.heads, 'hidden_act': act,
            'layer_norm_eps': spec.ln_eps}
  return {
      'architectures': ['SiglipModel'], 'model_type': 'siglip',
      'text_config': {'model_type': 'siglip_text_model', **tower(t), 'max_position_embeddings': t.context_length,
                      'vocab_size': t.vocab_size, 'projection_size': model_config.embed_dim},
      'vision_config': {'model_type': 'siglip_vision_model', **tower(v), 'image_size': v.image_size,
                        'patch_size': v.patch_size, 'num_channels': 3, 'vision_use_head': True},
  }
