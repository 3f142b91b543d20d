"""CLIP + SaCo on the embedded dataset with the tiny model: the paper's alpha = 5 on the summed L1 affinity
distance, no ramp, no mimic (from scratch the paper mimics a well-trained teacher; see configs/saco_cc3m.py). The
same data, budget and optimizer as configs/clip_shapes.py.

python -m vlp_jax.main --config=configs/saco_shapes.py --workdir=/tmp/saco
"""
from vlp_jax.config import shapes_baseline, with_term


def get_config():
  return with_term(shapes_baseline(), 'saco', alpha=5.0, normalization='sum')
