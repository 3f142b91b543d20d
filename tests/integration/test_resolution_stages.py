"""Staged resolution in one run (config.data.resolution_stages): the first stage trains at 8 px, the second at the
model's 16 px; at the switch the state's position embedding (parameters, Adam's moments, EMA) is resized; a run
stopped at the switch or after it resumes bit for bit; each stage's compiled program is reported with its compile
time and FLOPs; a checkpoint holds its stage's model."""
import contextlib
import io

import chex
import numpy as np
import pytest

import vlp_jax
from vlp_jax import parallel
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

from support import micro_config

pytestmark = pytest.mark.slow


def _run(config, workdir, **kwargs):
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    result = train_and_evaluate(config, workdir, **kwargs)
  return result, out.getvalue()


def _losses(workdir):
  return {r['step']: r['train/loss'] for r in read_metrics(workdir) if 'train/loss' in r}


@pytest.fixture(scope='module')
def runs(data_cache, tmp_path_factory):
  config = micro_config(data_cache)  # 16 px images, patch 4: a 4x4 grid; 2x2 at 8 px
  config.data.resolution_stages = ((0.0, 8), (0.5, 16))  # batches 0-2 at 8 px, 3-5 (steps 4-6) at 16 px
  config.ema.decay = 0.5
  config.eval.every_steps = 3  # step 3: the 8 px model on the eval set's 16 px images (the tower resizes)
  config.eval.tasks = ('zeroshot',)
  config.log_every_steps = 1
  config.checkpoint.async_save = False
  root = tmp_path_factory.mktemp('stages')
  out = {'config': config}
  for name, stops in (('full', ()), ('at_switch', (3,)), ('after_switch', (4,))):
    workdir = str(root / name)
    for stop in stops:
      _run(config, workdir, stop_at_step=stop)
    out[name], out[f'{name}_log'] = _run(config, workdir)
    out[f'{name}_dir'] = workdir
  return out


def test_a_run_resumed_at_or_after_the_switch_is_bit_for_bit_the_uninterrupted_one(runs):
  full = runs['full']['state']
  assert int(full.step) == 6
  for name in ('at_switch', 'after_switch'):
    resumed = runs[name]['state']
    for part in ('params', 'opt_state', 'ema', 'model_state'):
      chex.assert_trees_all_equal(parallel.to_host(getattr(resumed, part)), parallel.to_host(getattr(full, part)))
    assert _losses(runs[f'{name}_dir']) == _losses(runs['full_dir'])
  assert 'Resumed from step 3' in runs['at_switch_log'] and 'Resumed from step 4' in runs['after_switch_log']
  # resumed at the switch (its checkpoint holds the 8 px state), the run switches itself; after it, it does not
  assert 'Resolution stage from step 4: image size 8 -> 16' in runs['at_switch_log']
  assert 'Resolution stage from step' not in runs['after_switch_log']


def test_the_state_is_resized_at_the_switch_and_each_stage_reports_its_program(runs):
  log = runs['full_log']
  # parameters, Adam's mu and nu, the EMA: four copies of the position embedding
  assert 'Resolution stage from step 4: image size 8 -> 16; resized 4 copies of visual/positional_embedding' in log
  state = runs['full']['state']
  chex.assert_shape(state.params['visual']['positional_embedding'], (1 + 16, 32))
  (adam, *_), *_ = state.opt_state
  assert np.all(np.asarray(adam.nu['visual']['positional_embedding']) >= 0)
  lines = [line for line in log.splitlines() if line.startswith('Stage at image size')]
  assert [line.split(':')[0] for line in lines] == ['Stage at image size 8', 'Stage at image size 16']
  flops = [float(line.split(', ')[1].split(' GFLOP')[0]) for line in lines]
  assert 0 < flops[0] < flops[1]  # a quarter of the tokens: the low stage's step costs less
  assert all(' compiled in ' in line for line in lines)


def test_the_low_stage_evaluates_on_the_models_image_size(runs):
  evals = {r['step']: r for r in read_metrics(runs['full_dir']) if 'eval/synthetic/zeroshot_top1' in r}
  assert sorted(evals) == [3, 6] and all(np.isfinite(r['eval/synthetic/zeroshot_top1']) for r in evals.values())


def test_a_checkpoint_holds_its_stages_model(runs):
  # step 3 (before the switch) is an 8 px model with a 2x2 grid; it loads, embeds and names its image size
  loaded = vlp_jax.load(f'{runs["at_switch_dir"]}/checkpoints/3')
  assert loaded.config.model.vision.image_size == 8
  chex.assert_shape(loaded.variables['params']['visual']['positional_embedding'], (1 + 4, 32))
  final = vlp_jax.load(runs['full_dir'])
  assert final.config.model.vision.image_size == 16
