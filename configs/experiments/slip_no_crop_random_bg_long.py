"""Long-budget run: slip_no_crop_random_bg (SLIP on the alt-text captions, whole-image CLIP view, SimCLR views on random
backgrounds) for 1600 steps instead of 400. Versus clip_long.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP without the crop, SimCLR views on random backgrounds, 1600 steps'
BASELINE = 'clip_long'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_no_crop_random_bg.py'))
  config.total_steps = 1600
  return config
