"""Low-data run: configs/zerovl_shapes.py (mixup) on 1000 train pairs per source instead of 10000, the same 400 steps.
Versus clip_lowdata.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL, low data'
BASELINE = 'clip_lowdata'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.data.synthetic.num_train = 1000  # per source; the val and test splits are unchanged
  return config
