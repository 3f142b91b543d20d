"""Long-budget run: slip_paper_views (SLIP with the paper's views on the alt-text captions) for 1600 steps instead of
400. Versus its control clip_crop_long (CLIP on the same crop) and clip_long.
"""
import os

from vlp_jax.config import from_file

LABEL = "SLIP, the paper's views, alt-text captions, 1600 steps"
BASELINE = 'clip_long'
CONTROL = 'clip_crop_long'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_paper_views.py'))
  config.total_steps = 1600
  return config
