"""SLIP ablation: slip_no_crop with SimCLR weight 0.1 instead of 1: does SimCLR's cost on whole-image CLIP views scale
with its share of the gradient, and does a smaller share help? Versus slip_no_crop and configs/clip_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP without the crop, SimCLR weight 0.1'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_no_crop.py'))
  config.objective.ssl_scale = 0.1
  return config
