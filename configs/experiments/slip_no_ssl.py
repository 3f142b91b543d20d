"""SLIP ablation: slip_paper_views with SimCLR weight 0, i.e. CLIP on SLIP's views with its SimCLR head idle. Versus its
control configs/clip_crop_shapes.py (run clip_crop) and slip_paper_views.
"""
import os

from vlp_jax.config import from_file

LABEL = "SLIP's views, SimCLR weight 0"
CONTROL = 'clip_crop'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_paper_views.py'))
  config.objective.ssl_scale = 0.0
  return config
