"""Control for the source-biased setting of ZeroVL's debiased sampling: configs/clip_shapes.py on the detailed captions,
where every source's captions name every object (few repeated captions inside a source) while images and phrasing still
give the source away (data/synthetic.py).
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP, detailed captions'
BASELINE = 'clip_detailed'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'clip_shapes.py'))
  config.data.synthetic.captions = 'detailed'
  return config
