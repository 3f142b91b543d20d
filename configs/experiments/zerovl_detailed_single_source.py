"""ZeroVL in the source-biased setting with debiased sampling: zerovl_detailed_mixed (mixup, detailed captions) on
single-source batches. Versus zerovl_detailed_mixed and clip_detailed.
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL (mixup, single-source batches), detailed captions'
BASELINE = 'clip_detailed'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'zerovl_detailed_mixed.py'))
  config.data.mixing = 'single_source'
  return config
