"""lab/diagnostics/zerovl_stall.py end to end at micro size: `python -m vlp_jax.main --stop_at_step` stops part way
through the schedule of config.total_steps, the rows it keeps carry the within-batch similarities, and a rerun
skips the finished run."""
import json
import subprocess

import pytest

from support import FAST_COMPILE_XLA_FLAGS
from lab.diagnostics import zerovl_stall

MICRO = ('--config.total_steps=4', '--config.batch_size=8', '--config.log_every_steps=1',
         '--config.model.embed_dim=16', '--config.model.vision.width=16', '--config.model.vision.layers=1',
         '--config.model.vision.heads=2', '--config.model.text.width=16', '--config.model.text.layers=1',
         '--config.model.text.heads=2', '--config.model.text.context_length=16', '--config.data.synthetic.num_train=32',
         '--config.data.synthetic.num_val=8', '--config.data.synthetic.num_test=8', '--config.optim.warmup_steps=1')


@pytest.mark.slow
def test_runner_stops_part_way_keeps_the_rows_and_resumes(tmp_path, monkeypatch):
  monkeypatch.setenv('VLP_JAX_CACHE', str(tmp_path / 'cache'))
  monkeypatch.setenv('XLA_FLAGS', FAST_COMPILE_XLA_FLAGS)
  monkeypatch.setattr(zerovl_stall, 'BATCH', 8)
  path = zerovl_stall.run_one('single_source', 'studio', 0, str(tmp_path), steps=2, extra=MICRO)
  rows = [json.loads(line) for line in open(path)]
  assert [r['step'] for r in rows] == [1, 2]  # stopped at 2 of the 4 steps of the schedule
  for row in rows:
    assert set(row) == {'step', *zerovl_stall.KEYS}
    assert -1.0 <= row['image_batch_similarity'] <= 1.0 and -1.0 <= row['text_batch_similarity'] <= 1.0
  monkeypatch.setattr(subprocess, 'run', lambda *a, **k: pytest.fail('a finished run was trained again'))
  assert zerovl_stall.run_one('single_source', 'studio', 0, str(tmp_path), steps=2, extra=MICRO) == path
