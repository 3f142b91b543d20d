"""SigLIP on the records SigLIP 2 trains on: configs/siglip_shapes.py with each record also carrying its objects'
boxes and descriptions (data.synthetic.regions), which the sigmoid loss never reads. The control of
configs/siglip2_shapes.py: the same data, budget, optimizer and seed, so the difference is what SigLIP 2 adds (the
decoder, which reads the regions, and the late self-distillation and masked prediction). Its referring-expression
number comes from the frozen-feature probe (it has no decoder).
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs',
                                  'siglip_shapes.py'))
  config.data.synthetic.regions = True
  config.eval.tasks = (*config.eval.tasks, 'referring')
  return config
