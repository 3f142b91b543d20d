"""Model presets by name (open_clip's names) and the builder.

A config picks a preset with `config.model = models.preset('ViT-B-32')`; every field can then be overridden from the
command line (`--config.model.vision.layers=6`).
"""
from __future__ import annotations

import math

import ml_collections

from vlp_jax.models.clip import CLIP, build_model, init_params  # noqa: F401

_TEXT_BASE = dict(vocab_size=49408, context_length=77, width=512, layers=12, heads=8)

PRESETS: dict[str, dict] = {
    # CPU-sized: trains on the embedded dataset in minutes.
    'tiny': dict(embed_dim=128, vision=dict(image_size=32, patch_size=8, width=128, layers=4, heads=4),
                 text=dict(vocab_size=49408, context_length=32, width=128, layers=4, heads=4)),
    'ViT-B-32': dict(embed_dim=512, vision=dict(image_size=224, patch_size=32, width=768, layers=12, heads=12),
                     text=_TEXT_BASE),
    'ViT-B-16': dict(embed_dim=512, vision=dict(image_size=224, patch_size=16, width=768, layers=12, heads=12),
                     text=_TEXT_BASE),
}


def preset(name: str, **overrides) -> ml_collections.ConfigDict:
  """The model config of a named preset: name, embed_dim, vision, text, act, dtype, init_logit_scale."""
  if name not in PRESETS:
    raise ValueError(f"unknown model preset '{name}'; valid choices: {sorted(PRESETS)}")
  spec = PRESETS[name]
  cfg = ml_collections.ConfigDict({
      'name': name,
      'embed_dim': spec['embed_dim'],
      'vision': dict(spec['vision']),
      'text': dict(spec['text']),
      'act': 'gelu',  # 'quick_gelu' for OpenAI weights
      'dtype': 'float32',  # compute dtype; parameters stay float32
      'init_logit_scale': math.log(1 / 0.07),
  })
  cfg.update(overrides)
  return cfg
