"""CLIP on the embedded dataset with the tiny model: trains on a 2-core CPU in a few minutes.

python -m vlp_jax.main --config=configs/clip_synthetic_tiny.py --workdir=/tmp/run
"""
from vlp_jax.config import base_config


def get_config():
  config = base_config()
  config.seed = 0
  config.total_steps = 600
  config.batch_size = 128
  config.optim.lr = 1e-3
  config.optim.warmup_steps = 50
  config.optim.weight_decay = 0.1
  config.eval.every_steps = 300
  config.checkpoint.every_steps = 300
  return config
