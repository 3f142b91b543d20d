"""ZeroVL mixup ablation: the coin fixed to pixel mixup of the images on every step (lambda drawn as under the coin), to
separate which half of coin-flipping mixup acts. Versus configs/zerovl_shapes.py and zerovl_text_mixup.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL, pixel mixup of the images on every step (coin fixed)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.objective.mixup_modality = 'image'
  return config
