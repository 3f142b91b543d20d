"""The compute-matched control of saco_mimic: configs/clip_shapes.py trained for as many FLOPs as saco_mimic and the
CLIP teacher it mimics together. XLA counts 1.12x CLIP's FLOPs in saco_mimic's step (the frozen teacher's image tower
runs in it) and the teacher is a 400-step CLIP, so the pair costs 847 steps of CLIP (a test checks the figure).
"""
import os

from vlp_jax.config import from_file

STEPS = 847  # round((400 * saco_mimic's step FLOPs + 400 * the teacher's) / CLIP's)


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.total_steps = STEPS
  return config
