"""SaCo's "mimic alone" (SaCo main Tab. 4): CLIP plus the pseudo-affinity mimic of saco_mimic (beta 5, the same
separately seeded CLIP teacher) with alpha 0, no affinity consistency term. Versus CLIP and saco_mimic: it tells a
generic distillation from a frozen peer apart from SaCo's own term.
"""
import os

from vlp_jax.config import from_file

LABEL = 'pseudo-affinity mimic alone (beta 5, alpha 0)'
TEACHER = 'clip_teacher'
COMPUTE_CONTROL = 'clip_mimic_compute'  # the teacher's training counts as the method's compute, as saco_mimic's
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/linear_probe_top1',
           'within_source/affinity_consistency')


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'saco_mimic.py'))
  config.objective.saco.alpha = 0.0
  return config
