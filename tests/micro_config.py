"""The micro config the tests share (a module of its own, so that subprocess tests can load it as a config file
without importing conftest, which forces 8 devices)."""


def micro_config(cache_dir: str):
  """A model and dataset small enough that a few steps compile and run in seconds."""
  from vlp_jax.config import base_config
  config = base_config()
  config.total_steps = 6
  config.batch_size = 16
  config.model.embed_dim = 32
  config.model.vision.update(image_size=16, patch_size=4, width=32, layers=1, heads=2)
  config.model.text.update(context_length=16, width=32, layers=1, heads=2)
  config.data.cache_dir = cache_dir
  config.data.synthetic.update(resolution=16, num_train=64, num_val=16, num_test=32, shards=2)
  config.optim.warmup_steps = 2
  config.log_every_steps = 2
  config.eval.every_steps = 3
  config.eval.batch_size = 32
  # The evaluators the training tests check; segmentation, compositionality and the linear probe have their own tests
  # (each extra task compiles its own encode function in every run).
  config.eval.tasks = ('zeroshot', 'retrieval', 'affinity')
  config.checkpoint.every_steps = 3
  return config


def get_config():
  """As a config file: `--config=tests/micro_config.py`, with $VLP_JAX_CACHE as the data cache."""
  import os
  return micro_config(os.environ.get('VLP_JAX_CACHE', ''))
