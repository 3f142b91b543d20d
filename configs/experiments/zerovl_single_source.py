"""ZeroVL ablation: the recipe (mixup on mixed batches) on the paper's debiased, single-source batches. Versus
configs/zerovl_shapes.py; clip_single_source is CLIP on the same batches.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL (mixup) on single-source batches'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.data.mixing = 'single_source'
  return config
