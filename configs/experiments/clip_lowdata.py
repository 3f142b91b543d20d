"""Control for the low-data runs: configs/clip_shapes.py on a tenth of the train split (1000 pairs per source, about 17
epochs in the same 400 steps), where CLIP can overfit and the regularisers that ZeroVL's mixup and SLIP's SimCLR add
have something to act on.
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP, low data (3000 pairs)'
BASELINE = 'clip_lowdata'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_shapes.py'))
  config.data.synthetic.num_train = 1000  # per source; the val and test splits are unchanged
  return config
