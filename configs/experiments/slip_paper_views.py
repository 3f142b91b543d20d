"""SLIP ablation: SLIP's own views (RandomResizedCrop 0.5-1 as the CLIP view, SimCLR views on the records' own
backgrounds) on the alt-text captions, as configs/slip_shapes.py was before part 9 of benchmarks/RESULTS.md. Versus its
control configs/clip_crop_shapes.py (run clip_crop), CLIP on the same crop.
"""
import os

from vlp_jax.config import from_file

LABEL = "SLIP, the paper's views, alt-text captions"
CONTROL = 'clip_crop'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'slip_shapes.py'))
  config.data.synthetic.captions = 'alt_text'
  config.objective.clip_crop_scale = (0.5, 1.0)
  config.objective.ssl_background = 'keep'
  return config
