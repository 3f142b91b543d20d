"""SaCo's Algorithm 1 at small scale, the analogue of configs/saco_cc3m.py: a constant alpha 5 beside the
pseudo-affinity mimic (beta 5) of saco_mimic's separately seeded CLIP teacher, 'mean' normalisation. Chosen before the
table by the constant-alpha protocol of benchmarks/RESULTS.md on development seeds 0 and 1. Versus CLIP.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SaCo, Algorithm 1 (constant alpha 5 beside the mimic, beta 5)'
TEACHER = 'clip_teacher'
COMPUTE_CONTROL = 'clip_mimic_compute'  # the teacher's training counts as the method's compute, as saco_mimic's
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/linear_probe_top1',
           'within_source/affinity_consistency')


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'saco_mimic.py'))
  config.objective.saco.ramp = 'constant'
  return config
