"""The compute-matched control of SigLIP 2: siglip_regions trained for as many FLOPs as configs/siglip2_shapes.py.
XLA counts 69.52 GFLOPs in SigLIP 2's step (the late losses' branch, counted at every step, included) and 25.95 in
SigLIP's, 2.679x, so 400 steps of SigLIP 2 cost 1072 of SigLIP. Each file F measured on CPU by
python -c "import lab.compiled as m, vlp_jax.config as c; print(m.step_flops(c.from_file(F)))"
"""
import os

from vlp_jax.config import from_file

STEPS = 1072  # round(400 * SigLIP 2's step FLOPs / SigLIP's)


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'siglip_regions.py'))
  config.total_steps = STEPS
  return config
