"""SigLIP 2's ablation with SILC alone: configs/siglip2_shapes.py without the decoder and TIPS's masked prediction
(decoder_weight 0, masked_weight 0), i.e. the sigmoid loss, then SILC's local-to-global self-distillation from 80% of
the steps. Versus siglip_regions it isolates SILC (COSMOS found it gains at small scale only with a small weight).
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 with SILC only (sigmoid + late self-distillation)'
# the recipe's metrics (configs/siglip2_shapes.py), declared before this ablation's runs
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/referring_probe_acc50',
           'synthetic/segmentation_miou', 'synthetic/linear_probe_top1')
CONTROL = 'siglip_regions'
BASELINE = 'clip_regions'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'siglip2_shapes.py'))
  config.objective.update(decoder_weight=0.0, masked_weight=0.0)
  return config
