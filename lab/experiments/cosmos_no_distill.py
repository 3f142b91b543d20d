"""COSMOS's mechanism ablation: configs/cosmos_shapes.py without the cross-modal self-distillation L_cosmos (weight
0), i.e. the multi-crop CLIP term alone on COSMOS's crops and text pool, with its EMA. Versus COSMOS and COSMOS's
control clip_text_pool_augment_ema (one augmented view, an EMA): what the crops add without the distillation.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs',
                                  'cosmos_shapes.py'))
  config.objective.distill_weight = 0.0
  return config
