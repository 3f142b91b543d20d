"""SigLIP 2's ablation without its late losses: configs/siglip2_shapes.py with SILC's self-distillation and TIPS's
masked prediction off (distill_weight 0, masked_weight 0), i.e. the sigmoid loss and LocCa's decoder for the whole run.
Versus siglip2 it measures what the last 20% of self-distillation and masked prediction add; if the decoder carries
SigLIP 2's location gain (its §3.4.1 credits it for RefCOCO), this keeps most of it over siglip_regions.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 without SILC and TIPS (sigmoid + decoder)'
# the recipe's metrics (configs/siglip2_shapes.py), declared before this ablation's runs
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/referring_probe_acc50',
           'synthetic/segmentation_miou', 'synthetic/linear_probe_top1')
CONTROL = 'siglip_regions'
BASELINE = 'clip_regions'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'siglip2_shapes.py'))
  config.objective.update(distill_weight=0.0, masked_weight=0.0)
  return config
