"""Control for slip_lowdata: configs/clip_crop_shapes.py (CLIP on SLIP's random-crop CLIP view) on 1000 train pairs per
source instead of 10000, the same 400 steps. Versus clip_lowdata.
"""
import os

from vlp_jax.config import from_file

LABEL = "CLIP on SLIP's CLIP view, low data"
BASELINE = 'clip_lowdata'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_crop_shapes.py'))
  config.data.synthetic.num_train = 1000  # per source; the val and test splits are unchanged
  return config
