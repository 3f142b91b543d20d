"""Ablation of debiased sampling alone: clip_detailed (CLIP on the detailed captions) on single-source batches. Versus
clip_detailed (mixed batches).
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP, detailed captions, single-source batches'
BASELINE = 'clip_detailed'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_detailed.py'))
  config.data.mixing = 'single_source'
  return config
