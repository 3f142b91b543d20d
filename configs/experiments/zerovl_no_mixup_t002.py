"""Control for zerovl_t002: CLIP (ZeroVL without mixup) at the paper's constant temperature 0.02 (logit scale 50)
instead of the learned one. Versus zerovl_no_mixup (the learned temperature).
"""
import os

from vlp_jax.config import from_file

LABEL = "CLIP at ZeroVL's constant temperature 0.02 (ZeroVL, no mixup)"


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'zerovl_no_mixup.py'))
  config.objective.fixed_temperature = 0.02
  return config
