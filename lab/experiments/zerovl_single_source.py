"""ZeroVL's ablation: debiased (single-source) batches alone (no mixup, no text augmentation), with the recipe's
temperature initialised at 0.02. Versus its control clip_zerovl_temperature and the recipe configs/zerovl_shapes.py,
which has all three components.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs',
                                  'zerovl_shapes.py'))
  config.data.mixing = 'single_source'
  config.objective.mixup = False
  config.objective.text_augment = False
  return config
