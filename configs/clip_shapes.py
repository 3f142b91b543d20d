"""CLIP on the embedded dataset with the tiny model: trains, evaluates and checkpoints on a 2-core CPU in about
four minutes (the first run also generates the dataset, about 20 seconds).

python -m vlp_jax.main --config=configs/clip_shapes.py --workdir=/tmp/run
"""
from vlp_jax.config import shapes_baseline


def get_config():
  return shapes_baseline()
