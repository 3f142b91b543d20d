"""clip_detailed_single_source (CLIP, detailed captions, single-source batches) started from a trained CLIP. ZeroVL
starts from pre-trained encoders (its appendix A.9); here the start is the same seed's trained `clip` run (alt-text
captions), which benchmarks/methods.py passes as config.init.checkpoint, then 400 steps on the detailed captions. Versus
clip_pre_detailed.
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP from a trained CLIP, detailed captions, single-source batches'
AFTER = 'clip'
BASELINE = 'clip_pre_detailed'


def get_config():
  return from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_detailed_single_source.py'))
