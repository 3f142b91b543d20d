"""SaCo ablation: the recipe plus the paper's pseudo-affinity mimic (beta 5) of a frozen CLIP teacher's image
embeddings, computed in the step from the checkpoint of run clip_teacher (configs/clip_shapes.py with another seed),
which benchmarks/methods.py passes as config.objective.saco.teacher_checkpoint. Versus configs/saco_shapes.py.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SaCo + pseudo-affinity mimic (beta 5, separately seeded CLIP teacher)'
TEACHER = 'clip_teacher'
COMPUTE_CONTROL = 'clip_mimic_compute'  # the teacher's training counts as the method's compute
# the paper's: zero-shot, retrieval, linear probe, and affinity consistency, taken within each source (pooled, the
# source blocks make it high for any model that separates the sources: docs/data.md)
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/linear_probe_top1',
           'within_source/affinity_consistency')


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'saco_shapes.py'))
  config.objective.saco.beta = 5.0
  config.objective.saco.teacher = 'checkpoint'
  return config
