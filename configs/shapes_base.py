"""The shared setting of every configs/*_shapes.py file, not a method of its own: the tiny model on the embedded
dataset, 400 steps of batch 128 (a few minutes for CLIP on a 2-core CPU, evaluations included), so that methods
compare under one data, budget, seed and optimizer. configs/clip_shapes.py is CLIP on it; the other *_shapes.py files
load it with `from_file` and change only what their method needs.
"""
from vlp_jax.config import base_config


def get_config():
  config = base_config()
  config.seed = 0
  config.total_steps = 400
  config.batch_size = 128
  config.optim.update(lr=1e-3, warmup_steps=20, weight_decay=0.1)
  config.eval.every_steps = 100
  # the embedded dataset's long captions beside the short ones, each source alone (retrieval and affinity
  # consistency on all), and both restricted to the test examples that repeat no train caption or layout (what a
  # model gets right there it did not recall: docs/evidence.md)
  config.eval.datasets = ('synthetic', 'synthetic_long', 'synthetic_studio', 'synthetic_web', 'synthetic_sketch',
                          'synthetic_novel', 'synthetic_long_novel')
  config.data.probe_train_examples = 6000  # the linear probe fits on 2000 train images of each source
  # long captions that fit the tiny model's 32-token context (the default 'full' ones are cut in two thirds of the
  # scenes): what synthetic_long retrieves and what COSMOS crops sentences from (data/sources/synthetic_shapes.py)
  config.data.synthetic.long_captions = 'compact'
  config.checkpoint.every_steps = 200
  config.log_every_steps = 20
  return config
