"""SigLIP 2's ablation without the location tasks: configs/siglip2_shapes.py with the decoder trained on captions
only (decoder_tasks ('cap',): no referring expressions, no grounded captions). Versus siglip2 it measures what the
boxes teach; LocCa reports each location task helping RefCOCO, so its referring accuracy should fall towards
siglip_regions' while retrieval and zero-shot stay about the same.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 with a captioning-only decoder'
# the recipe's metrics (configs/siglip2_shapes.py), declared before this ablation's runs
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/referring_probe_acc50',
           'synthetic/segmentation_miou', 'synthetic/linear_probe_top1')
CONTROL = 'siglip_regions'
BASELINE = 'clip_regions'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'siglip2_shapes.py'))
  config.objective.decoder_tasks = ('cap',)
  return config
