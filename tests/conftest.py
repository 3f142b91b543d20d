"""Test setup: 8 virtual CPU devices (set before jax is imported), the repository and tests/ on the path (for
`support`, the helpers the tests share), and the micro config fixture."""
import os
import sys

# The suite is bound by XLA's compile time. LLVM at optimisation level 1 compiles the CPU programs faster (about 10%
# of the suite) and computes the same values (support.jit_init; the parity and equality tests pass either way).
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8'
                           ' --xla_backend_optimization_level=1').strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_TESTS), _TESTS]

import pytest  # noqa: E402

from support import micro_config  # noqa: E402


@pytest.fixture(scope='session')
def data_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp('vlp_cache'))


@pytest.fixture
def micro(data_cache):
  return micro_config(data_cache)
