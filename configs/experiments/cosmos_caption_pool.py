"""COSMOS ablation: the short caption only as one more sentence of the text-crop pool, not also the first global text
crop. Versus configs/cosmos_shapes.py and cosmos_no_caption.
"""
import os

from vlp_jax.config import from_file

LABEL = 'COSMOS, the short caption only as one more sentence of the pool'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cosmos_shapes.py'))
  config.objective.caption_first_global = False
  return config
