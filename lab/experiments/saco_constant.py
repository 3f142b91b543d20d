"""SaCo's Algorithm 1 at small scale, the analogue of configs/saco_cc3m.py: a constant alpha 5 beside the
pseudo-affinity mimic (beta 5) of saco_mimic's separately seeded CLIP teacher, 'mean' normalisation. Chosen before the
table by the constant-alpha protocol of benchmarks/RESULTS.md on development seeds 0 and 1. Versus CLIP.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'saco_mimic.py'))
  config.objective.saco.ramp = 'constant'
  return config
