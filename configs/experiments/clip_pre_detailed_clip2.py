"""clip_pre_detailed with every step's gradient clipped to norm 2: the control for
clip_pre_detailed_single_source_clip2. Single-source steps swing the gradient norm between sources
(benchmarks/batch_spread.py); clipping every step to one norm takes that swing out of Adam's updates, on both kinds of
batches. Started, like clip_pre_detailed, from the same seed's trained `clip` run. Versus clip_pre_detailed.
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP from a trained CLIP, detailed captions, gradients clipped to norm 2'
AFTER = 'clip'
BASELINE = 'clip_pre_detailed'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_detailed.py'))
  config.optim.grad_clip_norm = 2.0
  return config
