"""The compute-matched control of SLIP: configs/clip_shapes.py trained for as many FLOPs as configs/slip_shapes.py.
XLA counts 1.72x CLIP's FLOPs in SLIP's step (`lab/compiled.py` `step_flops`; a test checks the ratio), so
400 steps of SLIP cost 688 steps of CLIP; the schedule stretches with them.
"""
import os

from vlp_jax.config import from_file

STEPS = 688  # round(400 * SLIP's step FLOPs / CLIP's)


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.total_steps = STEPS
  return config
