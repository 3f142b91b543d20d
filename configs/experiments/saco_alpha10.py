"""SaCo ablation: alpha 10, twice the recipe's weight on the SaCo term (still ramped linearly from 0). Versus
configs/saco_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SaCo, alpha 10 (twice the recipe)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'saco_shapes.py'))
  config.objective.saco.alpha = 10.0
  return config
