"""The compute-matched control of SigLIP 2: siglip_regions trained for as many FLOPs as configs/siglip2_shapes.py.
XLA counts 739.4 GFLOPs in SigLIP 2's step (715.9 without the late losses: the decoder is most of it) and 25.9 in
SigLIP's, 28.50x, so 400 steps of SigLIP 2 cost 11399 of SigLIP (27.77x and 11109 if the 80% of steps before the
switch were counted without the late losses' branch, which XLA counts at every step). Each file F measured on CPU by
python -c "import benchmarks.methods as m, vlp_jax.config as c; print(m.step_flops(c.from_file(F)))"
"""
import os

from vlp_jax.config import from_file

LABEL = "SigLIP on SigLIP 2's records for SigLIP 2's FLOPs (compute-matched control)"
BASELINE = 'clip_regions'
STEPS = 11399  # round(400 * SigLIP 2's step FLOPs / SigLIP's)


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'siglip_regions.py'))
  config.total_steps = STEPS
  return config
