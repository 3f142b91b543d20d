"""SaCo ablation: the recipe plus the paper's pseudo-affinity mimic (beta 5) of a frozen CLIP teacher's image
embeddings, computed in the step from the checkpoint of run clip_teacher (configs/clip_shapes.py with another seed),
which lab/methods.py passes as config.objective.saco.teacher_checkpoint. Versus configs/saco_shapes.py.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'saco_shapes.py'))
  config.objective.saco.beta = 5.0
  config.objective.saco.teacher = 'checkpoint'
  return config
