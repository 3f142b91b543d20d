"""Control for zerovl_tinydata: configs/clip_shapes.py on 300 train pairs per source (about 57 epochs in the same 400
steps), where CLIP can memorise its pairs and mixup has the most to regularise.
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP, 900 pairs'
BASELINE = 'clip_tinydata'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_shapes.py'))
  config.data.synthetic.num_train = 300  # per source; the val and test splits are unchanged
  return config
