"""SigLIP 2's ablation with TIPS alone: configs/siglip2_shapes.py without the decoder and SILC's self-distillation
(decoder_weight 0, distill_weight 0), i.e. the sigmoid loss, then masked patch prediction against the EMA teacher from
80% of the steps (the objective runs it without SILC: one global view, no local crops). Versus siglip_regions it
isolates TIPS; its paper expects dense gains with flat global metrics.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 with TIPS only (sigmoid + late masked prediction)'
# the recipe's metrics (configs/siglip2_shapes.py), declared before this ablation's runs
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/referring_probe_acc50',
           'synthetic/segmentation_miou', 'synthetic/linear_probe_top1')
CONTROL = 'siglip_regions'
BASELINE = 'clip_regions'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'siglip2_shapes.py'))
  config.objective.update(decoder_weight=0.0, distill_weight=0.0)
  return config
