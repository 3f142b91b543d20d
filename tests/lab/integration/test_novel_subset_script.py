"""lab/diagnostics/novel_subset.py as a user runs it: it prints the novel subset of the configured dataset."""
import json
import os
import subprocess
import sys

import pytest

from support import MICRO_CONFIG, ROOT
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.evalsets.synthetic import novel_subset


@pytest.mark.slow
def test_the_benchmark_prints_the_subset_of_the_configured_dataset(micro):
  """lab/diagnostics/novel_subset.py, the command docs/evidence.md quotes, prints what novel_subset gives."""
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'lab', 'diagnostics', 'novel_subset.py'),
                           f'--config={MICRO_CONFIG}'], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, 'VLP_JAX_CACHE': micro.data.cache_dir})
  assert result.returncode == 0, result.stderr[-3000:]
  row = json.loads(result.stdout.splitlines()[-1])
  subset = novel_subset(synthetic.spec_from_config(micro.data), 'test', micro.data.cache_dir)
  assert row == {'split': 'test', 'examples': subset.total, 'novel': len(subset.keys),
                 'caption_seen': round(subset.caption_seen, 4), 'layout_seen': round(subset.layout_seen, 4),
                 'digest': synthetic.spec_from_config(micro.data).digest()}
