"""SLIP diagnostic: configs/slip_shapes.py on the alt-text captions, i.e. slip_no_crop with each SimCLR view on its own
random background (the records' class masks find it), so the two views share only their objects: whether SimCLR's cost
comes from the per-image web background, an instance cue. Versus slip_no_crop and configs/clip_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP without the crop, SimCLR views on random backgrounds'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'slip_shapes.py'))
  config.data.synthetic.captions = 'alt_text'
  return config
