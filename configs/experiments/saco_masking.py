"""SaCo ablation: the recipe plus the paper's hard sample-wise masking (pairs whose image-text cosine is above 0.5 are
left out of the affinity distance). Versus configs/saco_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SaCo + hard sample-wise masking (cosine > 0.5)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'saco_shapes.py'))
  config.objective.saco.masking = 'hard'
  return config
