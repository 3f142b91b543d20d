"""The control of ZeroVL: configs/clip_shapes.py with ZeroVL's initial temperature, 0.02 (trainable, as in
configs/zerovl_shapes.py), on mixed batches: the same model, data, budget and seed, without ZeroVL's components.
"""
import math
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.model.init_logit_scale = math.log(1 / 0.02)
  return config
