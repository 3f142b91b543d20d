"""SigLIP 2 with wrong boxes: configs/siglip2_shapes.py with every training record carrying another record's regions
(data.synthetic.shuffle_regions: a fixed derangement; the images, captions and eval sets are untouched), so the
decoder's location tasks learn boxes and descriptions that are not in the image. If correct geometry is what helps,
its referring accuracy falls to about siglip2_captions_only's, or below.
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 with boxes shuffled across images'
# the recipe's metrics (configs/siglip2_shapes.py), declared before this ablation's runs
METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/referring_probe_acc50',
           'synthetic/segmentation_miou', 'synthetic/linear_probe_top1')
CONTROL = 'siglip_regions'
BASELINE = 'clip_regions'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'siglip2_shapes.py'))
  config.data.synthetic.shuffle_regions = True
  return config
