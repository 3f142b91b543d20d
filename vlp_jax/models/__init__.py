"""Model presets by name (open_clip's names) and the builder.

A config picks a preset with `config.model = models.preset('ViT-B-32')`; every field can then be overridden from the
command line (`--config.model.vision.layers=6`).
"""
from __future__ import annotations

import math

import ml_collections

from vlp_jax.models.clip import CLIP, build_model, init_variables  # noqa: F401
from vlp_jax.registry import Registry

_TEXT_BASE = dict(vocab_size=49408, context_length=77, width=512, layers=12, heads=8)


def _vit(image_size: int, patch_size: int, width: int, layers: int, heads: int) -> dict:
  # patch_dropout: the fraction of patch tokens each image drops in training (FLIP; models/vit.py), in [0, 1).
  return dict(type='vit', image_size=image_size, patch_size=patch_size, width=width, layers=layers, heads=heads,
              stages=(), patch_dropout=0.0)


def _resnet(image_size: int, stages: tuple[int, ...], width: int) -> dict:
  # OpenAI's rule for the attention-pool heads; patch_size, layers and patch_dropout (which validation keeps at 0)
  # do not apply. Every vision dict has the same keys, as `complete` gives an old config the tiny preset's.
  return dict(type='resnet', image_size=image_size, patch_size=32, width=width, layers=0, heads=width * 32 // 64,
              stages=stages, patch_dropout=0.0)


_PRESETS = {
    # CPU-sized: trains on the embedded dataset in minutes.
    'tiny': dict(embed_dim=128, vision=_vit(32, 8, width=128, layers=4, heads=4),
                 text=dict(vocab_size=49408, context_length=32, width=128, layers=4, heads=4)),
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
}


PRESETS: Registry[dict] = Registry('model preset', 'model.name')
for _name, _spec in _PRESETS.items():
  PRESETS.add(_name, _spec)
  if _name != 'tiny':  # '<name>-quickgelu' variants, as in open_clip: the activation of OpenAI-trained towers
    PRESETS.add(f'{_name}-quickgelu', dict(_spec, act='quick_gelu'))


def preset(name: str, **overrides) -> ml_collections.ConfigDict:
  """The model config of a named preset: name, embed_dim, vision, text, act, dtype, init_logit_scale.

  vision.type is 'vit' (patch_size, width, layers, heads, patch_dropout) or 'resnet' (stages, width, heads).
  """
  spec = PRESETS.get(name)
  cfg = ml_collections.ConfigDict({
      'name': name,
      'embed_dim': spec['embed_dim'],
      'vision': dict(spec['vision']),
      'text': dict(spec['text']),
      'act': spec.get('act', 'gelu'),  # 'quick_gelu' for OpenAI weights
      'dtype': 'float32',  # compute dtype ('bfloat16' for mixed precision); parameters and loss math stay float32
      'remat': False,  # recompute transformer-block activations in the backward pass to save memory
      'remat_policy': 'nothing_saveable',  # what remat keeps (transformer.REMAT_POLICIES)
      'scan_layers': False,  # run each tower's blocks as one scanned layer (transformer.BlockStack)
      'init_logit_scale': math.log(1 / 0.07),
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
