"""Very-low-data run: configs/zerovl_shapes.py (mixup) on 300 train pairs per source instead of 10000, the same 400
steps. Versus clip_tinydata.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL (mixup), 900 pairs'
BASELINE = 'clip_tinydata'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.data.synthetic.num_train = 300  # per source; the val and test splits are unchanged
  return config
