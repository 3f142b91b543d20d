"""SLIP (CLIP + SimCLR, c = 1, tau = 0.1) on the embedded dataset with the tiny model; the same data, budget, seed
and optimizer as configs/clip_shapes.py. The SimCLR head is scaled down to the tiny model (width 128): mlp_dim 512
and out_dim 128 instead of the paper's 4096 and 256 (ViT-B, width 768). Each step runs the image tower on three
views (the CLIP view and two SimCLR views): about 1.8x a CLIP step, some 6 minutes on a 2-core CPU.

python -m vlp_jax.main --config=configs/slip_shapes.py --workdir=/tmp/slip
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.objective.name = 'slip'
  config.objective.ssl_scale = 1.0
  config.objective.ssl_temperature = 0.1
  config.objective.head_mlp_dim = 512
  config.objective.head_out_dim = 128
  config.objective.clip_crop_scale = (0.5, 1.0)
  config.objective.ssl_crop_scale = (0.08, 1.0)
  config.objective.ssl_color_jitter = (0.4, 0.4, 0.4, 0.1)
  config.objective.ssl_grayscale_prob = 0.2
  return config
