"""COSMOS ablation: the paper's global image crops (RandomResizedCrop 0.4-1) instead of the recipe's whole image. Versus
configs/cosmos_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = "COSMOS, the paper's global image crops (RandomResizedCrop 0.4-1)"


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cosmos_shapes.py'))
  config.objective.global_crop_scale = (0.4, 1.0)
  return config
