"""COSMOS ablation: without the cross-modal self-distillation L_cosmos (weight 0), i.e. CLIP on COSMOS's crops. Versus
configs/cosmos_shapes.py and configs/clip_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'COSMOS without L_cosmos (CLIP on its crops)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cosmos_shapes.py'))
  config.objective.distill_weight = 0.0
  return config
