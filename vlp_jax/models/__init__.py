"""Model presets by name (open_clip's names) and the builder.

A config picks a preset with `config.model = models.preset('ViT-B-32')`; every field can then be overridden from the
command line (`--config.model.vision.layers=6`).
"""
from __future__ import annotations

import math

import ml_collections

from vlp_jax.models.clip import CLIP, build_model, init_variables  # noqa: F401
from vlp_jax.registry import Registry

def _text(width: int = 512, layers: int = 12, heads: int = 8, context_length: int = 77, **options) -> dict:
  """A text tower: CLIP's (causal, pooled at the EOT token, CLIP's BPE) unless `options` say otherwise.

  causal: attention masks later tokens; pool: 'eot' (the position of the largest id, CLIP's EOT) or 'last' (the
  last position); proj_bias: a bias after `text_projection`; mlp_width: the blocks' MLP hidden width (0 = 4 *
  width); ln_eps: the LayerNorms' epsilon; tokenizer: 'clip_bpe' or 'sentencepiece', whose model file is read
  from tokenizer_path (data/tokenizer.py).
  """
  spec = dict(vocab_size=49408, context_length=context_length, width=width, layers=layers, heads=heads,
              causal=True, pool='eot', proj_bias=False, mlp_width=0, ln_eps=1e-5, tokenizer='clip_bpe',
              tokenizer_path='')
  unknown = set(options) - set(spec)
  if unknown:
    raise TypeError(f'unknown text tower options {sorted(unknown)}')
  return {**spec, **options}


_TEXT_BASE = _text()


def _vit(image_size: int, patch_size: int, width: int, layers: int, heads: int, type: str = 'vit',  # noqa: A002
         mlp_width: int = 0, ln_eps: float = 1e-5) -> dict:
  # patch_dropout: the fraction of patch tokens each image drops in training (FLIP; models/vit.py), in [0, 1).
  # type 'siglip_vit': SigLIP's tower (no class token, attention pooling; models/siglip_vit.py).
  return dict(type=type, image_size=image_size, patch_size=patch_size, width=width, layers=layers, heads=heads,
              stages=(), patch_dropout=0.0, mlp_width=mlp_width, ln_eps=ln_eps)


def _resnet(image_size: int, stages: tuple[int, ...], width: int) -> dict:
  # OpenAI's rule for the attention-pool heads; patch_size, layers, mlp_width, ln_eps and patch_dropout (which
  # validation keeps at 0) do not apply. Every vision dict has the same keys, as `complete` gives an old config the
  # tiny preset's.
  return dict(type='resnet', image_size=image_size, patch_size=32, width=width, layers=0, heads=width * 32 // 64,
              stages=stages, patch_dropout=0.0, mlp_width=0, ln_eps=1e-5)


def _siglip(image_size: int, patch_size: int, width: int, layers: int, heads: int, context_length: int,
            mlp_width: int = 0) -> dict:
  """A SigLIP preset (transformers' SiglipModel, open_clip's '-SigLIP' models): tanh-GELU, LayerNorm eps 1e-6,
  the same width in both towers and the joint space, a bidirectional text tower pooled at its last position with a
  biased projection, SentencePiece tokens (32k vocabulary), logit scale log 10 and bias -10 at initialisation."""
  return dict(embed_dim=width, act='gelu_tanh', init_logit_scale=math.log(10.0), init_logit_bias=-10.0,
              vision=_vit(image_size, patch_size, width, layers, heads, type='siglip_vit', mlp_width=mlp_width,
                          ln_eps=1e-6),
              text=_text(width, layers, heads, context_length, vocab_size=32000, causal=False, pool='last',
                         proj_bias=True, mlp_width=mlp_width, ln_eps=1e-6, tokenizer='sentencepiece'))


_PRESETS = {
    # CPU-sized: trains on the embedded dataset in minutes.
    'tiny': dict(embed_dim=128, vision=_vit(32, 8, width=128, layers=4, heads=4),
                 text=_text(128, 4, 4, context_length=32)),
    # ViT-S: SLIP's backbone (ViT-Small, 384 wide, 6 heads of 64) with open_clip's matching 384-wide text tower.
    'ViT-S-32': dict(embed_dim=384, vision=_vit(224, 32, width=384, layers=12, heads=6),
                     text=dict(_TEXT_BASE, width=384, heads=6)),
    'ViT-S-16': dict(embed_dim=384, vision=_vit(224, 16, width=384, layers=12, heads=6),
                     text=dict(_TEXT_BASE, width=384, heads=6)),
    'ViT-B-32': dict(embed_dim=512, vision=_vit(224, 32, width=768, layers=12, heads=12), text=_TEXT_BASE),
    'ViT-B-16': dict(embed_dim=512, vision=_vit(224, 16, width=768, layers=12, heads=12), text=_TEXT_BASE),
    'ViT-L-14': dict(embed_dim=768, vision=_vit(224, 14, width=1024, layers=24, heads=16),
                     text=dict(_TEXT_BASE, width=768, heads=12)),
    'ViT-L-16': dict(embed_dim=768, vision=_vit(224, 16, width=1024, layers=24, heads=16),
                     text=dict(_TEXT_BASE, width=768, heads=12)),
    # ViT-H: heads of 80 channels in the image tower (open_clip's head_width=80), 64 in the text tower.
    'ViT-H-14': dict(embed_dim=1024, vision=_vit(224, 14, width=1280, layers=32, heads=16),
                     text=dict(_TEXT_BASE, width=1024, heads=16, layers=24)),
    'RN50': dict(embed_dim=1024, vision=_resnet(224, (3, 4, 6, 3), width=64), text=_TEXT_BASE),
    # SigLIP (Zhai et al. 2023), at the image sizes and context lengths of the released checkpoints.
    'ViT-B-16-SigLIP': _siglip(224, 16, 768, 12, 12, context_length=64),
    'ViT-B-16-SigLIP-256': _siglip(256, 16, 768, 12, 12, context_length=64),
    'ViT-B-16-SigLIP-384': _siglip(384, 16, 768, 12, 12, context_length=64),
    'ViT-B-16-SigLIP-512': _siglip(512, 16, 768, 12, 12, context_length=64),
    'ViT-L-16-SigLIP-256': _siglip(256, 16, 1024, 24, 16, context_length=64),
    'ViT-L-16-SigLIP-384': _siglip(384, 16, 1024, 24, 16, context_length=64),
    # So400m: MLP width 4304 (open_clip's mlp_ratio 3.7362); at 384 px a 14 px patch grid is 27 x 27 (the conv
    # drops the last 6 pixels), as in the checkpoints.
    'ViT-SO400M-14-SigLIP': _siglip(224, 14, 1152, 27, 16, context_length=16, mlp_width=4304),
    'ViT-SO400M-14-SigLIP-384': _siglip(384, 14, 1152, 27, 16, context_length=64, mlp_width=4304),
}


PRESETS: Registry[dict] = Registry('model preset', 'model.name')
for _name, _spec in _PRESETS.items():
  PRESETS.add(_name, _spec)
  if _name != 'tiny' and 'SigLIP' not in _name:  # '<name>-quickgelu' variants, as in open_clip: OpenAI's activation
    PRESETS.add(f'{_name}-quickgelu', dict(_spec, act='quick_gelu'))


def preset(name: str, **overrides) -> ml_collections.ConfigDict:
  """The model config of a named preset: name, embed_dim, vision, text, act, dtype, init_logit_scale,
  init_logit_bias.

  vision.type is 'vit' (patch_size, width, layers, heads, patch_dropout, mlp_width, ln_eps), 'siglip_vit' (the
  same keys) or 'resnet' (stages, width, heads). The text keys are `_text`'s.
  """
  spec = PRESETS.get(name)
  cfg = ml_collections.ConfigDict({
      'name': name,
      'embed_dim': spec['embed_dim'],
      'vision': dict(spec['vision']),
      'text': dict(spec['text']),
      'act': spec.get('act', 'gelu'),  # 'quick_gelu' for OpenAI weights, 'gelu_tanh' for SigLIP's
      'dtype': 'float32',  # compute dtype ('bfloat16' for mixed precision); parameters and loss math stay float32
      'remat': False,  # recompute transformer-block activations in the backward pass to save memory
      'remat_policy': 'nothing_saveable',  # what remat keeps (transformer.REMAT_POLICIES)
      'scan_layers': False,  # run each tower's blocks as one scanned layer (transformer.BlockStack)
      'init_logit_scale': spec.get('init_logit_scale', math.log(1 / 0.07)),
      # A learned logit bias in the model (SigLIP's, -10 at init) when not None; the siglip objective uses it.
      'init_logit_bias': spec.get('init_logit_bias', None),
  })
  cfg.update(overrides)
  return cfg


def complete(saved_model: dict | ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A model config saved by an earlier version (a checkpoint's `model`) with the keys added since at the defaults
  of `preset('tiny')`; saved values are kept."""
  saved = saved_model.to_dict() if isinstance(saved_model, ml_collections.ConfigDict) else dict(saved_model)
  merged = preset('tiny').to_dict()
  for key, value in saved.items():
    merged[key] = {**merged[key], **value} if isinstance(merged.get(key), dict) and isinstance(value, dict) else value
  return ml_collections.ConfigDict(merged)
