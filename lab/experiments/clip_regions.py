"""CLIP on the records SigLIP 2 trains on (configs/siglip2_shapes.py): configs/clip_shapes.py with each record also
carrying its objects' boxes and descriptions (data.synthetic.regions). The contrastive loss never reads them, so this
trains as clip_shapes does (the same images, captions and draws); it is the baseline that sees exactly SigLIP 2's
data, and its evaluation adds the referring-expression probe, which fits on the train split's regions.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.data.synthetic.regions = True
  config.eval.tasks = (*config.eval.tasks, 'referring')
  return config
