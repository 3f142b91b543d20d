"""The compute-matched control of COSMOS: clip_text_pool trained for as many FLOPs as configs/cosmos_shapes.py. XLA
counts 3.39x CLIP's FLOPs in COSMOS's step (`lab/compiled.py` `step_flops`; a test checks the ratio), so 400
steps of COSMOS cost 1355 steps of CLIP; the schedule stretches with them.
"""
import os

from vlp_jax.config import from_file

STEPS = 1355  # round(400 * COSMOS's step FLOPs / CLIP's)


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_text_pool.py'))
  config.total_steps = STEPS
  return config
