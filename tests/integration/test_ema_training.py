"""A run with an EMA of the weights (config.ema.decay): stopped and resumed, its EMA is bit-identical to an
uninterrupted run's; it is evaluated beside the weights as eval/<set>/ema_*, in training and by
`python -m vlp_jax.evaluate`; `vlp_jax.load(..., ema=True)` embeds with it."""
import chex
import numpy as np
import pytest

import vlp_jax
from vlp_jax import models, parallel
from vlp_jax.cli import evaluate
from vlp_jax.data.tokenizer import default_tokenizer
from vlp_jax.losses.contrastive import l2_normalize
from vlp_jax.training.loop import latest_eval, train_and_evaluate

# Each test here reads the runs of the module fixture, which train: the quick loop leaves them out.
pytestmark = pytest.mark.slow

CAPTIONS = ['a red circle', 'two green triangles']


@pytest.fixture(scope='module')
def runs(data_cache, tmp_path_factory):
  """{'full': 6 steps in one go, 'split': 3 steps, stop, resume, 3 more}: each train_and_evaluate's result, and
  the workdirs."""
  from support import micro_config
  config = micro_config(data_cache)
  config.ema.decay = 0.5  # far from the weights after 6 steps, and from the initial ones
  config.eval.every_steps = 100  # evaluate only at the end
  root = tmp_path_factory.mktemp('ema')
  full = train_and_evaluate(config, str(root / 'full'))
  train_and_evaluate(config, str(root / 'split'), stop_at_step=3)
  split = train_and_evaluate(config, str(root / 'split'))
  return {'full': full, 'split': split, 'full_dir': str(root / 'full'), 'split_dir': str(root / 'split')}


def test_a_resumed_run_has_a_bit_identical_ema(runs):
  full, split = runs['full']['state'], runs['split']['state']
  assert int(split.step) == int(full.step) == 6
  chex.assert_trees_all_equal(parallel.to_host(split.ema), parallel.to_host(full.ema))
  chex.assert_trees_all_equal(parallel.to_host(split.params), parallel.to_host(full.params))
  scores = lambda run: {k: v for k, v in run['eval'].items() if k.startswith('eval/')}  # noqa: E731
  assert scores(runs['split']) == scores(runs['full']) and 'eval/synthetic/ema_zeroshot_top1' in scores(runs['full'])


def test_the_ema_is_evaluated_beside_the_weights_in_training_and_by_the_evaluate_command(runs, tmp_path):
  in_training = latest_eval(runs['full_dir'])
  plain = {k for k in in_training if not k.startswith('eval/synthetic/ema_') and k.startswith('eval/synthetic/')}
  assert 'eval/synthetic/zeroshot_top1' in plain and 'eval/synthetic/i2t_r1' in plain
  assert {k.replace('eval/synthetic/', 'eval/synthetic/ema_') for k in plain} <= set(in_training)
  # The command evaluates the checkpoint's EMA too, with the numbers of the in-training evaluation.
  assert evaluate.run(runs['full_dir'], output_dir=str(tmp_path / 'out')) == in_training


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
