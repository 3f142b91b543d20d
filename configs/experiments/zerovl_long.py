"""Long-budget run: configs/zerovl_shapes.py (mixup) for 1600 steps instead of 400, to see whether mixup pays with more
steps. Versus clip_long.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL (mixup), 1600 steps'
BASELINE = 'clip_long'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.total_steps = 1600
  return config
