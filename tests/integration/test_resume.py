"""N steps in one run == N/2 steps, stop, resume, N/2 more: same parameters, optimizer state and data order."""
import pytest
import json

import chex
import numpy as np

from vlp_jax import parallel
from vlp_jax.training.checkpoint import Checkpointer
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics


def _train_losses(workdir):
  return {r['step']: r['train/loss'] for r in read_metrics(workdir) if 'train/loss' in r}


@pytest.mark.slow
def test_resume_is_exact(micro, tmp_path, capsys):
  micro.eval.every_steps = 100  # evaluate only at the end
  assert micro.checkpoint.async_save  # the default: the split run saves asynchronously, the full run does not
  synchronous = micro.copy_and_resolve_references()
  synchronous.checkpoint.async_save = False
  full = train_and_evaluate(synchronous, str(tmp_path / 'full'))
  first = train_and_evaluate(micro, str(tmp_path / 'split'), stop_at_step=3)
  assert first['step'] == 3 and not first['eval']
  second = train_and_evaluate(micro, str(tmp_path / 'split'))
  assert 'Resumed from step 3' in capsys.readouterr().out
  assert int(second['state'].step) == int(full['state'].step) == 6
  # Exact equality: the same data batches in the same order, and the same optimizer state.
  chex.assert_trees_all_equal(parallel.to_host(second['state'].params), parallel.to_host(full['state'].params))
  chex.assert_trees_all_equal(parallel.to_host(second['state'].opt_state),
                              parallel.to_host(full['state'].opt_state))
  assert _train_losses(tmp_path / 'split') == _train_losses(tmp_path / 'full')
  scores = lambda r: {k: v for k, v in r.items() if k.startswith('eval/')}  # noqa: E731
  assert scores(second['eval']) == scores(full['eval']) and scores(full['eval'])
  data_state = json.loads((tmp_path / 'split' / 'checkpoints' / '6' / 'data' / 'process_0-of-1.json').read_text())
  assert data_state == json.loads((tmp_path / 'full' / 'checkpoints' / '6' / 'data' /
                                   'process_0-of-1.json').read_text())
  # Both ways of saving leave complete checkpoints: every file written, and the manifest that lists them.
  for run in ('full', 'split'):
    checkpointer = Checkpointer(str(tmp_path / run))
    assert checkpointer.latest_complete_step() == 6 and checkpointer.check(3) is None
    checkpointer.close()
  # A third run finds the training finished and does nothing.
  third = train_and_evaluate(micro, str(tmp_path / 'split'))
  assert third['state'] is None and third['step'] == 6
  assert 'Training already finished' in capsys.readouterr().out
  assert np.isfinite(list(third['eval'].values())).all()
