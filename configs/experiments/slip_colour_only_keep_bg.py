"""SLIP diagnostic on the colour-only captions: configs/slip_shapes.py with SimCLR views on the records' own backgrounds
instead of random ones, i.e. with the web scenes' background cue left in. Versus configs/clip_colour_only_shapes.py (run
clip_colour_only) and configs/slip_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = "SLIP, SimCLR views on the records' own backgrounds, colour-only captions"
BASELINE = 'clip_colour_only'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'slip_shapes.py'))
  config.objective.ssl_background = 'keep'
  return config
