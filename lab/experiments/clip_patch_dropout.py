"""CLIP with FLIP's patch dropout at 50% (FLIP's main setting) against configs/clip_shapes.py at equal steps, data
and seed: each training image keeps its class token and a random 8 of its 16 patches; evaluation sees them all. The
FLOPs column says what it saved. FLIP found equal or better accuracy at equal epochs on LAION-400M with ViT-L; 16
patches of a 32-pixel image are far from that, so this asks only whether the lever costs accuracy at this scale.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.model.vision.patch_dropout = 0.5
  return config
