"""SigLIP (sigmoid loss, learnable scale init log 10 and bias init -10) on the embedded dataset with the tiny model;
the same data, budget and optimizer as configs/clip_shapes.py.

python -m vlp_jax.main --config=configs/siglip_shapes.py --workdir=/tmp/siglip
"""
import math
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.objective.name = 'siglip'
  config.objective.init_logit_bias = -10.0
  config.model.init_logit_scale = math.log(10.0)
  return config
