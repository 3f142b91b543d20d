"""Low-data run: slip_paper_views (SLIP with the paper's views on the alt-text captions) on 1000 train pairs per source
instead of 10000, the same 400 steps. Versus its control clip_crop_lowdata and clip_lowdata.
"""
import os

from vlp_jax.config import from_file

LABEL = "SLIP, the paper's views, low data"
BASELINE = 'clip_lowdata'
CONTROL = 'clip_crop_lowdata'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slip_paper_views.py'))
  config.data.synthetic.num_train = 1000  # per source; the val and test splits are unchanged
  return config
