"""Test setup: 8 virtual CPU devices (set before jax is imported) and a micro config shared by the tests."""
import os
import sys

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8').strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402


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
  config.checkpoint.every_steps = 3
  return config


@pytest.fixture(scope='session')
def data_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp('vlp_cache'))


@pytest.fixture
def micro(data_cache):
  return micro_config(data_cache)
