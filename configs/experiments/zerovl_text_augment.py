"""ZeroVL ablation: the recipe (mixup on mixed batches) plus the paper's text augmentation (mask, replace and delete
tokens). Versus configs/zerovl_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL (mixup) with text augmentation'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.objective.text_augment = True
  return config
