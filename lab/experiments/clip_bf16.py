"""CLIP with its towers computing in bf16 against configs/clip_shapes.py in float32 (same model, data, steps, seed):
does the mixed precision of every cc3m config (as the papers' reference code trains) change what training reaches?
Parameters, optimizer state and loss math stay float32 (docs/scaling.md). Expected: level within seed noise. On the
CPU bf16 is no faster; this run is about accuracy, not speed.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.model.dtype = 'bfloat16'
  return config
