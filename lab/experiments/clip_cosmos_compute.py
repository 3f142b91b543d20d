"""A compute-matched plain CLIP for COSMOS: configs/clip_shapes.py (the short captions, no augmentation, no text pool)
trained for as many FLOPs as configs/cosmos_shapes.py, 1355 steps (as clip_text_pool_compute: its step costs what
CLIP's does). Beside COSMOS's own controls it asks whether COSMOS beats simply training CLIP longer.
"""
import os

from vlp_jax.config import from_file

STEPS = 1355  # round(400 * COSMOS's step FLOPs / CLIP's), as clip_text_pool_compute


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.total_steps = STEPS
  return config
