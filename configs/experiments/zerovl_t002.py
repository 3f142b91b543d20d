"""ZeroVL ablation: the recipe (mixup on mixed batches) at the paper's constant temperature 0.02 (logit scale 50)
instead of the learned one. Versus its control zerovl_no_mixup_t002, the same without mixup.
"""
import os

from vlp_jax.config import from_file

LABEL = "ZeroVL (mixup) at the paper's constant temperature 0.02"
CONTROL = 'zerovl_no_mixup_t002'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.objective.fixed_temperature = 0.02
  return config
