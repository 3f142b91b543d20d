"""CLIP on the embedded dataset with the tiny model: trains, evaluates and checkpoints on a 2-core CPU in about
four minutes (the first run also generates the dataset, about 20 seconds).

python -m vlp_jax.main --config=configs/clip_synthetic_tiny.py --workdir=/tmp/run
"""
from vlp_jax.config import base_config


def get_config():
  config = base_config()
  config.seed = 0
  config.total_steps = 400
  config.batch_size = 128
  config.optim.update(lr=1e-3, warmup_steps=20, weight_decay=0.1)
  config.eval.every_steps = 100
  config.checkpoint.every_steps = 200
  config.log_every_steps = 20
  return config
