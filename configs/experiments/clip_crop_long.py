"""Control for slip_long: configs/clip_crop_shapes.py (CLIP on SLIP's random-crop CLIP view) for 1600 steps instead of
400. Versus clip_long.
"""
import os

from vlp_jax.config import from_file

LABEL = "CLIP on SLIP's CLIP view, 1600 steps"
BASELINE = 'clip_long'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_crop_shapes.py'))
  config.total_steps = 1600
  return config
