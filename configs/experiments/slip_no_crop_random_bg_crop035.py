"""SLIP ablation: slip_no_crop_random_bg with SimCLR crops of scale 0.35-1 instead of 0.08-1, so that a SimCLR view
keeps more of its objects. Versus slip_no_crop_random_bg.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP without the crop, SimCLR views on random backgrounds, crops 0.35-1'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_no_crop_random_bg.py'))
  config.objective.ssl_crop_scale = (0.35, 1.0)
  return config
