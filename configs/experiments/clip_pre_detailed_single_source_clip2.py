"""clip_pre_detailed_single_source with every step's gradient clipped to norm 2, to take the sources' swing of the
gradient norm out of Adam's updates. Started from the same seed's trained `clip` run. Versus its control
clip_pre_detailed_clip2 (mixed batches, the same clipping) and clip_pre_detailed.
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP from a trained CLIP, detailed captions, single-source batches, gradients clipped to norm 2'
AFTER = 'clip'
BASELINE = 'clip_pre_detailed'
CONTROL = 'clip_pre_detailed_clip2'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_detailed_single_source.py'))
  config.optim.grad_clip_norm = 2.0
  return config
