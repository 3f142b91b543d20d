"""SaCo ablation: the recipe plus hard sample-wise masking (supplementary, strategy 2): a sample whose image-text
cosine is at most 0.5 (our threshold; the paper gives none) is masked, and every pair it is part of is left out of the
affinity distance, normalised over the kept pairs. Versus its control configs/clip_shapes.py and the recipe.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'saco_shapes.py'))
  config.objective.saco.masking = 'hard'
  return config
