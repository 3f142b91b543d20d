"""Control for zerovl_single_source: CLIP on the paper's debiased, single-source batches (every batch from one source),
to separate the sampling from mixup. Versus configs/clip_shapes.py (mixed batches).
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP with single-source batches'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_shapes.py'))
  config.data.mixing = 'single_source'
  return config
