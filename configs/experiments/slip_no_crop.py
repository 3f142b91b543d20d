"""SLIP ablation: slip_paper_views without the crop, i.e. SLIP on the alt-text captions with the whole image as its CLIP
view (as configs/slip_shapes.py) and SimCLR views on the records' own backgrounds. Versus configs/clip_shapes.py, CLIP
on the same whole-image view.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP with the whole image as its CLIP view (no random crop)'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'slip_shapes.py'))
  config.data.synthetic.captions = 'alt_text'
  config.objective.ssl_background = 'keep'
  return config
