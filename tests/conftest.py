"""Test setup: 8 virtual CPU devices (set before jax is imported), the repository and tests/ on the path (for
`support`, the helpers the tests share), the micro config fixture, a stochastic image tower for the tests of
tower randomness, and `--compile-report=DIR` (tests/compile_report.py)."""
import atexit
import os
import shutil
import sys
import tempfile

# The suite is bound by XLA's compile time. Every test process and every command a test starts compiles with
# support.FAST_COMPILE_XLA_FLAGS (see there), and shares one persistent compilation cache for the session: a resumed,
# relaunched or multi-process run loads the programs an earlier process compiled instead of compiling them again.
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_TESTS), _TESTS]
from support import FAST_COMPILE_XLA_FLAGS  # noqa: E402

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8 '
                           + FAST_COMPILE_XLA_FLAGS).strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:  # the first conftest of the session (pytest-xdist's controller)
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='vlp_jax_test_xla_cache_')
  atexit.register(shutil.rmtree, os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '-1')  # every program, however small

from typing import Any  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import pytest  # noqa: E402

from compile_report import CompileReport  # noqa: E402
from support import micro_config, set_unoptimised_compiles  # noqa: E402
from vlp_jax.models.towers import VISION_TOWERS, fold_in_rows  # noqa: E402


def pytest_addoption(parser):
  parser.addoption('--compile-report', metavar='DIR', default='',
                   help="append each test's CPU seconds and jax compile events to DIR/<pid>.jsonl "
                        '(tests/compile_report.py; summary: python tools/summarize_compile_report.py DIR)')


def pytest_configure(config):
  if config.getoption('--compile-report'):
    config.pluginmanager.register(CompileReport(config.getoption('--compile-report')), 'compile_report')


# The unit and parity tests compile many programs and run each a few times, so XLA's optimisations cost them more than
# they save: with jax_disable_most_optimizations (LLVM at level 0 without its expensive passes) the three costliest
# unit files took 123 CPU-s instead of 197, all passing. The integration tests train tens of steps, as users do, and
# keep the optimised code (at level 0 their steps ran up to 4x slower). Where a unit test compares the bits of two
# programs that round alike only when optimised, its fixture compiles them under support.optimised_compiles.
UNOPTIMISED_FOLDERS = ('unit', 'parity')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """Each test's setup, call and teardown (module fixtures it is the first to need included) under its folder's
  compile setting."""
  set_unoptimised_compiles(os.path.relpath(str(item.path), _TESTS).split(os.sep)[0] in UNOPTIMISED_FOLDERS)
  yield


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
