"""SaCo ablation: alpha 5 from the first step (constant) instead of the recipe's linear ramp from 0, the paper's
incremental-alpha remedy for training from scratch. Versus configs/saco_shapes.py.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'saco_shapes.py'))
  config.objective.saco.ramp = 'constant'
  return config
