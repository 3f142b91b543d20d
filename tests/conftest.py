"""Test setup: 8 virtual CPU devices (set before jax is imported), the repository and tests/ on the path (for
`support`, the helpers the tests share), the micro config fixture, and a stochastic image tower for the tests of
tower randomness."""
import os
import sys

# The suite is bound by XLA's compile time. LLVM at optimisation level 1 compiles the CPU programs faster (about 10%
# of the suite) and computes the same values (support.jit_init; the parity and equality tests pass either way).
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8'
                           ' --xla_backend_optimization_level=1').strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_TESTS), _TESTS]

from typing import Any  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import pytest  # noqa: E402

from support import micro_config  # noqa: E402
from vlp_jax.models.towers import VISION_TOWERS, fold_in_rows  # noqa: E402


@pytest.fixture(scope='session')
def data_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp('vlp_cache'))


@pytest.fixture
def micro(data_cache):
  return micro_config(data_cache)


class NoisyTower(nn.Module):
  """A ViT with a stochastic option: when training, Gaussian noise on each image, drawn from that image's key."""
  inner: Any
  scale: float = 0.5

  @nn.compact
  def __call__(self, images, train=False, with_tokens=True, rng=None):
    if train:
      assert rng is not None and rng.shape == images.shape[:1], 'a training tower gets one key per image'
      noise = jax.vmap(lambda key: jax.random.normal(key, images.shape[1:]))(fold_in_rows(rng, 0))
      images = images + self.scale * noise
    else:
      assert rng is None, 'an eval tower gets no keys'
    return self.inner(images, train=train, with_tokens=with_tokens)


@pytest.fixture
def noisy_vision_tower(monkeypatch):
  """Registers NoisyTower as vision.type 'noisy' (for the test only), with the ViT's options and checks, as a tower
  option would be; returns its registry entry. Training with it, a step is exact only if every row keeps its key."""
  vit = VISION_TOWERS.get('vit')

  class Noisy(vit):
    name = 'noisy'

    @classmethod
    def build(cls, *args):
      return NoisyTower(vit.build(*args))

  monkeypatch.setitem(VISION_TOWERS, 'noisy', Noisy)
  return Noisy
