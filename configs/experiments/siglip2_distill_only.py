"""SigLIP 2's ablation with SILC alone: configs/siglip2_shapes.py without the decoder and TIPS's masked prediction
(decoder_weight 0, masked_weight 0), i.e. the sigmoid loss, then SILC's local-to-global self-distillation from 80% of
the steps. Versus siglip_regions it isolates SILC (COSMOS found it gains at small scale only with a small weight).
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 with SILC only (sigmoid + late self-distillation)'
CONTROL = 'siglip_regions'
BASELINE = 'clip_regions'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'siglip2_shapes.py'))
  config.objective.update(decoder_weight=0.0, masked_weight=0.0)
  return config
