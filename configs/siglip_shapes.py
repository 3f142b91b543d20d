"""SigLIP (sigmoid loss, learnable scale init log 10 and bias init -10) on the embedded dataset with the tiny model;
the same data, budget and optimizer as configs/clip_shapes.py.

python -m vlp_jax.main --config=configs/siglip_shapes.py --workdir=/tmp/siglip
"""
import math

from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.objective.name = 'siglip'
  config.objective.init_logit_bias = -10.0
  config.model.init_logit_scale = math.log(10.0)
  return config
