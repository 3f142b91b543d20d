"""SLIP ablation: slip_paper_views with SLIP's own SimCLR colour augmentation (hue jitter 0.1, grayscale 0.2), which the
recipe leaves out because the classes are colour + shape. Versus slip_paper_views.
"""
import os

from vlp_jax.config import from_file

LABEL = "SLIP, SLIP's SimCLR colour augmentation (hue jitter 0.1, grayscale 0.2)"


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_paper_views.py'))
  config.objective.ssl_color_jitter = (0.4, 0.4, 0.4, 0.1)
  config.objective.ssl_grayscale_prob = 0.2
  return config
