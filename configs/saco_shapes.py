"""CLIP + SaCo from scratch on the embedded dataset with the tiny model: the paper's Algorithm 1 with its best single
remedy for training from scratch without a teacher, the incremental alpha (alpha grows linearly from 0 to 5 over the
whole run). The same data, budget and optimizer as configs/clip_shapes.py, its control.

The affinity distance is the mean over the B x B entries ('mean'), not the literal sum of the pseudocode: the paper's
Figure 3b plots "the SaCo loss of Eq. 5" at the scale of the per-entry mean, and alpha = 5 on the sum would weigh the
term B^2 times more (16384 at batch 128), leaving the contrastive loss no say. The sum, alpha without the ramp, alpha
10, masking and the mimic are ablations in configs/experiments/saco_*.py (`benchmarks/methods.py
--methods=ablate_saco`); benchmarks/RESULTS.md has their figures.

python -m vlp_jax.main --config=configs/saco_shapes.py --workdir=/tmp/saco
"""
import os

from vlp_jax.config import from_file, with_term

LABEL = 'CLIP + SaCo (from scratch)'  # benchmarks/methods.py, run `saco`


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  return with_term(config, 'saco', alpha=5.0, normalization='mean', ramp='linear', ramp_steps=0)  # 0: the whole run
