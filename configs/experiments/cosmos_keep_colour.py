"""COSMOS ablation: the crops without hue jitter and grayscale (DINO's augmentations otherwise), since the classes are
colour + shape. Versus configs/cosmos_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'COSMOS, crops without hue jitter and grayscale'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cosmos_shapes.py'))
  config.objective.crop_color_jitter = (0.4, 0.4, 0.2, 0.0)
  config.objective.crop_grayscale_prob = 0.0
  return config
