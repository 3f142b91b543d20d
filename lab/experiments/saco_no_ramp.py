"""SaCo ablation: alpha 5 from the first step (constant) instead of the recipe's linear ramp from 0, the paper's
incremental-alpha remedy for training from scratch. Versus configs/saco_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SaCo, no ramp'
# the paper's: zero-shot, retrieval, linear probe, and affinity consistency, taken within each source (pooled, the
# source blocks make it high for any model that separates the sources: docs/data.md)
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/linear_probe_top1',
           'within_source/affinity_consistency')


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'saco_shapes.py'))
  config.objective.saco.ramp = 'constant'
  return config
