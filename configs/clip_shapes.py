"""CLIP on the embedded dataset with the tiny model (configs/shapes_base.py unchanged): the control of SaCo and SLIP,
and the CLIP the other controls start from (at equal steps each sees exactly its method's data: docs/evidence.md). Trains, evaluates
and checkpoints on a 2-core CPU in a few minutes (the first run also generates the dataset).

python -m vlp_jax.main --config=configs/clip_shapes.py --workdir=/tmp/run
"""
import os

from vlp_jax.config import from_file


def get_config():
  return from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
