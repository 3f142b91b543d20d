"""configs/clip_shapes.py unchanged: the frozen teacher of saco_mimic's pseudo-affinity mimic. lab/methods.py
trains it with seed + 1000 (a CLIP other than the one saco_mimic is compared with) and leaves it out of the tables.
"""
import os

from vlp_jax.config import from_file


def get_config():
  return from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
