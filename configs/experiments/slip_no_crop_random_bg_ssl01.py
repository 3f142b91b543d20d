"""SLIP ablation: slip_no_crop_random_bg with SimCLR weight 0.1 instead of 1. Versus slip_no_crop_random_bg and
slip_no_crop_ssl01 (the same weight on the records' backgrounds).
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP without the crop, SimCLR views on random backgrounds, weight 0.1'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_no_crop_random_bg.py'))
  config.objective.ssl_scale = 0.1
  return config
