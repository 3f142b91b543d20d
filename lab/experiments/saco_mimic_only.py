"""SaCo's "mimic alone" (SaCo main Tab. 4): CLIP plus the pseudo-affinity mimic of saco_mimic (beta 5, the same
separately seeded CLIP teacher) with alpha 0, no affinity consistency term. Versus CLIP and saco_mimic: it tells a
generic distillation from a frozen peer apart from SaCo's own term.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'saco_mimic.py'))
  config.objective.saco.alpha = 0.0
  return config
