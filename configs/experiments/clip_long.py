"""Control for the long-budget runs: configs/clip_shapes.py for 1600 steps (4x the budget, about 7 epochs of the train
split) instead of 400. Mixup and SimCLR are regularisers that slow the fit, and 400 steps may end before they pay.
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP, 1600 steps'
BASELINE = 'clip_long'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_shapes.py'))
  config.total_steps = 1600
  return config
