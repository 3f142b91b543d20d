"""N steps in one run == N/2 steps, stop, resume, N/2 more: the same parameters, optimizer state, EMA of the weights
(config.ema.decay), data order and evaluation. The EMA is evaluated beside the weights as eval/<set>/ema_*, in
training and by `python -m vlp_jax.evaluate`; `vlp_jax.load(..., ema=True)` embeds with it.

One pair of runs serves every test here (each run compiles its train step and evaluators): the uninterrupted run
saves synchronously, the split one asynchronously (the default), so both ways of saving are checked. A run without
an EMA resumes exactly in test_reliability.py, test_webdataset_training.py and test_multihost.py."""
import contextlib
import io
import json

import chex
import numpy as np
import pytest

import vlp_jax
from vlp_jax import models, parallel
from vlp_jax.cli import evaluate_command
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.losses.contrastive import l2_normalize
from vlp_jax.training.checkpoint import Checkpointer
from vlp_jax.training.loop import latest_eval, train_and_evaluate
from vlp_jax.training.writer import read_metrics

from support import micro_config

# Each test here reads the runs of the module fixture, which train: the quick loop leaves them out.
pytestmark = pytest.mark.slow

CAPTIONS = ['a red circle', 'two green triangles']


def _train_losses(workdir):
  return {r['step']: r['train/loss'] for r in read_metrics(workdir) if 'train/loss' in r}


def _printed(fn, *args, **kwargs):
  """(fn's result, what it printed to stdout)."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    result = fn(*args, **kwargs)
  return result, out.getvalue()


@pytest.fixture(scope='module')
def runs(data_cache, tmp_path_factory):
  """{'full': 6 steps in one go (saved synchronously), 'first' and 'split': 3 steps, stop, resume, 3 more (saved
  asynchronously), 'third': the split run started once more}: each train_and_evaluate's result and what it printed
  (`<name>_out`), and the workdirs (`<name>_dir`)."""
  config = micro_config(data_cache)
  config.ema.decay = 0.5  # far from the weights after 6 steps, and from the initial ones
  config.eval.every_steps = 100  # evaluate only at the end
  assert config.checkpoint.async_save  # the default: the split run saves asynchronously, the full run does not
  synchronous = config.copy_and_resolve_references()
  synchronous.checkpoint.async_save = False
  root = tmp_path_factory.mktemp('resume')
  full_dir, split_dir = str(root / 'full'), str(root / 'split')
  out = {'full_dir': full_dir, 'split_dir': split_dir, 'full': train_and_evaluate(synchronous, full_dir)}
  out['first'] = train_and_evaluate(config, split_dir, stop_at_step=3)
  out['split'], out['split_out'] = _printed(train_and_evaluate, config, split_dir)
  out['third'], out['third_out'] = _printed(train_and_evaluate, config, split_dir)
  return out


def test_resume_is_exact(runs):
  full, first, second = runs['full'], runs['first'], runs['split']
  assert first['step'] == 3 and not first['eval']
  assert 'Resumed from step 3' in runs['split_out']
  assert int(second['state'].step) == int(full['state'].step) == 6
  # Exact equality: the same data batches in the same order, and the same optimizer state and EMA.
  for part in ('params', 'opt_state', 'ema'):
    chex.assert_trees_all_equal(parallel.to_host(getattr(second['state'], part)),
                                parallel.to_host(getattr(full['state'], part)))
  assert _train_losses(runs['split_dir']) == _train_losses(runs['full_dir'])
  scores = lambda r: {k: v for k, v in r.items() if k.startswith('eval/')}  # noqa: E731
  assert scores(second['eval']) == scores(full['eval']) and 'eval/synthetic/ema_zeroshot_top1' in scores(full['eval'])
  data_state = [json.loads(open(f'{runs[run]}/checkpoints/6/data/process_0-of-1.json').read())
                for run in ('split_dir', 'full_dir')]
  assert data_state[0] == data_state[1]
  # Both ways of saving leave complete checkpoints: every file written, and the manifest that lists them.
  for run in ('full_dir', 'split_dir'):
    checkpointer = Checkpointer(runs[run])
    assert checkpointer.latest_complete_step() == 6 and checkpointer.check(3) is None
    checkpointer.close()
  # A third run finds the training finished and does nothing.
  third = runs['third']
  assert third['state'] is None and third['step'] == 6
  assert 'Training already finished' in runs['third_out']
  assert np.isfinite(list(third['eval'].values())).all()


def test_the_ema_is_evaluated_beside_the_weights_in_training_and_by_the_evaluate_command(runs, tmp_path):
  in_training = latest_eval(runs['full_dir'])
  plain = {k for k in in_training if not k.startswith('eval/synthetic/ema_') and k.startswith('eval/synthetic/')}
  assert 'eval/synthetic/zeroshot_top1' in plain and 'eval/synthetic/i2t_r1' in plain
  assert {k.replace('eval/synthetic/', 'eval/synthetic/ema_') for k in plain} <= set(in_training)
  # The command evaluates the checkpoint's EMA too, with the numbers of the in-training evaluation.
  assert evaluate_command.run(runs['full_dir'], output_dir=str(tmp_path / 'out')) == in_training


def test_load_with_ema_embeds_with_the_ema_of_the_weights(runs):
  ema = parallel.to_host(runs['full']['state'].ema)
  loaded = vlp_jax.load(runs['full_dir'], ema=True)
  chex.assert_trees_all_equal(parallel.to_host(loaded.variables['params']), ema)
  model = models.build_model(loaded.config.model)
  tokens = default_tokenizer()(CAPTIONS, context_length=loaded.context_length)
  want = l2_normalize(model.apply({'params': ema}, tokens, method=model.encode_text)['embed'])
  got = loaded.encode_text(CAPTIONS)
  np.testing.assert_allclose(got, np.asarray(want), rtol=0, atol=1e-6)
  assert not np.allclose(got, vlp_jax.load(runs['full_dir']).encode_text(CAPTIONS), atol=1e-3)  # not the weights'
