"""CLIP on SLIP's own CLIP view (RandomResizedCrop of scale 0.5-1 instead of the centre crop of configs/clip_shapes.py),
with the same data, budget, seed and optimizer, as the SLIP paper trains its CLIP baseline on the same view as SLIP.
A control, not a recipe: for SLIP with the paper's views on the alt-text captions (run `slip_paper_views`,
`benchmarks/methods.py --methods=ablate_slip`); benchmarks/RESULTS.md has the comparison.

python -m vlp_jax.main --config=configs/clip_crop_shapes.py --workdir=/tmp/clip_crop
"""
import os

from vlp_jax.config import from_file

LABEL = "CLIP on SLIP's CLIP view (control for SLIP's views)"  # benchmarks/methods.py, run `clip_crop`


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.data.crop_scale = (0.5, 1.0)
  return config
