"""The control for configs/slip_shapes.py: CLIP on SLIP's CLIP view (RandomResizedCrop of scale 0.5-1 instead of the
centre crop of configs/clip_shapes.py), with the same data, budget, seed and optimizer, as the SLIP paper trains its
CLIP baseline on the same view as SLIP. Any difference between the two runs then comes from the SimCLR term.

python -m vlp_jax.main --config=configs/clip_crop_shapes.py --workdir=/tmp/clip_crop
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.data.crop_scale = (0.5, 1.0)
  return config
