"""The control of COSMOS the paper uses (COSMOS Tab. 5 row 3, Tab. 19-20 "CLIP w/ Aug. EMA"): clip_text_pool with
COSMOS's image augmentations on its one view (DINO's global-view flips, colour jitter, grayscale, blur and
solarisation: config.data.augment='dino') and an EMA of the weights at COSMOS's teacher momentum, evaluated beside
the weights as eval/<set>/ema_*. The table compares the weights, as it does COSMOS's student.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_text_pool.py'))
  config.data.augment = 'dino'  # COSMOS's global views are the whole image here, as this one is
  config.ema.decay = 0.99  # configs/cosmos_shapes.py's ema_momentum
  return config
