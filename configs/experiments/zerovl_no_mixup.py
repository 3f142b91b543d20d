"""ZeroVL ablation: the recipe without mixup, i.e. CLIP through the ZeroVL objective (the same loss as
configs/clip_shapes.py). A check of the objective against configs/clip_shapes.py, and the control of mixup.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL without mixup (CLIP through the ZeroVL objective)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.objective.mixup = False
  return config
