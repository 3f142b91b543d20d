"""ZeroVL in the source-biased setting: configs/zerovl_shapes.py (mixup on mixed batches) on the detailed captions.
Versus clip_detailed and zerovl_detailed_single_source.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL (mixup on mixed batches), detailed captions'
BASELINE = 'clip_detailed'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.data.synthetic.captions = 'detailed'
  return config
