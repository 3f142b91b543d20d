"""SaCo ablation: the affinity distance summed over the B x B entries, as the paper's pseudocode writes it literally,
instead of the recipe's mean, with alpha 5 constant (no ramp). Versus configs/saco_shapes.py and saco_no_ramp (the same
constant alpha on the mean).
"""
import os

from vlp_jax.config import from_file

LABEL = 'SaCo, alpha 5 on the sum over B^2 entries (pseudocode literally)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'saco_shapes.py'))
  config.objective.saco.normalization = 'sum'
  config.objective.saco.ramp = 'constant'
  return config
