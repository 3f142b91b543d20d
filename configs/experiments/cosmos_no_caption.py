"""COSMOS ablation: the paper's text, text crops from the long caption only; the recipe also puts the short caption in
the pool and makes it the first global text crop. Versus configs/cosmos_shapes.py and cosmos_caption_pool.
"""
import os

from vlp_jax.config import from_file

LABEL = "COSMOS, text crops from the long caption only (the paper's text)"


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cosmos_shapes.py'))
  config.objective.caption_in_text_crops = False
  config.objective.caption_first_global = False
  return config
