"""vlp_jax/cli/allocator.py (set by the train command, not by `import vlp_jax`): the temporaries of a compiled
function, freed and allocated again on every call from XLA's
worker threads, are reused instead of being mapped and page-faulted afresh."""
import json
import os
import subprocess
import sys
import textwrap

from support import ROOT
import pytest


# A fresh process that sets the allocator first, as `python -m vlp_jax.main` does: a jitted function with a 96 MB
# temporary runs 16 times (the heap settles over the first few: up to 8 with the suite's 8 host devices of
# conftest.py); prints the minor page faults of each of the last five runs, and whether the allocator was set.
PROBE = textwrap.dedent("""
    import json, resource
    import os
    from vlp_jax.cli import allocator
    import vlp_jax, vlp_jax.main, vlp_jax.evaluate, vlp_jax.embed, vlp_jax.weights, vlp_jax.convert
    was_set = allocator.retain_freed_memory() if os.environ.get('PROBE_SET_ALLOCATOR') == '1' else False
    import jax, jax.numpy as jnp

    @jax.jit
    def with_temporary(x):
      big = jnp.outer(x, x)  # [4900, 4900] f32: 96 MB, a temporary of the compiled function
      return jnp.sum(jnp.sin(big), axis=0)

    x = jnp.linspace(0.0, 1.0, 4900)
    counts = []
    for _ in range(16):
      before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
      with_temporary(x).block_until_ready()
      counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(json.dumps({'set': was_set, 'faults': counts[11:]}))
""")


def probe(env_extra: dict) -> dict:
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', **env_extra}
  out = subprocess.run([sys.executable, '-c', PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='the allocator settings are glibc mallopt')
def test_a_compiled_functions_temporaries_are_reused_without_page_faults():
  pages = 96 * 2**20 // 4096
  kept = probe({'PROBE_SET_ALLOCATOR': '1'})
  assert kept['set'], 'mallopt was not applied (not glibc?)'
  # Once the heap has settled, calls reuse the block: with the suite's 8 host devices and other tests beside it,
  # an occasional call still lands elsewhere, so the check is that some of the last five fault (almost) nothing.
  # With glibc's defaults none of them can.
  assert min(kept['faults']) < pages // 20, kept
  # With glibc's defaults the temporary is mapped afresh on every call and every page faults again: what the
  # setting exists for, so check that the probe sees it.
  default = probe({'VLP_JAX_MALLOC': 'default', 'PROBE_SET_ALLOCATOR': '1'})
  assert not default['set']
  assert min(default['faults']) > pages // 2, default


@pytest.mark.slow
def test_importing_vlp_jax_changes_no_process_wide_setting():
  """Importing the package and every command module leaves glibc's malloc as it was (every call of the probe faults
  its temporary in again, as with the defaults), and `import vlp_jax` imports no jax: a notebook that also runs
  torch keeps its allocator."""
  imported_only = probe({})
  assert not imported_only['set']
  assert min(imported_only['faults']) > 96 * 2**20 // 4096 // 2, imported_only
  light = subprocess.run([sys.executable, '-c', 'import sys, vlp_jax; print("jax" in sys.modules)'], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
  assert light.stdout.strip() == 'False', light.stderr[-2000:]
