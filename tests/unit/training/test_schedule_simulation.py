"""Every shipped config's optimizer over its whole run (training/schedule_check.py: the real chain, built from the
config as the loop builds it, on a small tree with the run's parameter groups, in one lax.scan): no group decays to
nothing before it trains, late groups start at the switch the paper puts them at, the learning-rate ramps end where
the papers say, and the logit scale stays in bounds (an imported scale is not clipped unless the objective bounds
it). The papers' figures below are written from the papers (../shared/SIGLIP2.md, METHODS.md), not read from the
configs."""
import glob
import math
import os

import numpy as np
import pytest

from support import ROOT
from vlp_jax import objectives
from vlp_jax.config import from_file
from vlp_jax.models import groups
from vlp_jax.objectives.siglip2 import DISTILL_HEAD, MASK_TOKEN, MASKED_HEAD
from vlp_jax.training import optim, schedule_check

CONFIGS = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, 'configs', '*.py')))
QUICK = ('siglip2_shapes',)  # the late-starting heads at small scale; the other configs (seconds each) are slow
# Where each paper's learning-rate warmup ends, as a function of the run length, and SigLIP 2's switch (of the
# steps): SigLIP 2 §2.1 (20k warmup steps of about 1.22M; the switch at 80%), COSMOS (2000 steps), SLIP (one of 40
# epochs on CC3M), SaCo's CLIP on CC3M (one of 32 epochs), ZeroVL's code (2.5% of the steps), the continued
# pre-training of SaCo's Algorithm 2 (no warmup, a constant rate).
PAPER_WARMUP = {'siglip2_webli': lambda total: 20_000, 'cosmos_cc3m': lambda total: 2000,
                'slip_cc3m': lambda total: total / 40, 'clip_cc3m': lambda total: total / 32,
                'saco_cc3m': lambda total: total / 32, 'zerovl_multisource': lambda total: 0.025 * total,
                'clip_continue': lambda total: 0, 'saco_continue': lambda total: 0}
PAPER_SWITCH = {'siglip2_webli': 0.8, 'siglip2_shapes': 0.8}
KEPT = 0.5  # of its initial norm, the least a group may hold when it starts training


def _config(name):
  return from_file(os.path.join(ROOT, 'configs', f'{name}.py'))


def _check(name):
  config = _config(name)
  trains_from = None  # when groups start training: the objective's word, unless a paper says otherwise
  if name in PAPER_SWITCH:  # SigLIP 2's heads and mask token train from the switch
    _, shapes = schedule_check.parameter_shapes(config)
    switch = round(PAPER_SWITCH[name] * config.total_steps)
    trains_from = {group: switch for group in (DISTILL_HEAD, MASKED_HEAD, MASK_TOKEN) if group in shapes}
    assert trains_from
  run = schedule_check.simulate_schedule(config, trains_from=trains_from)
  assert run.finite, f'{name}: a parameter became non-finite'
  # No group decays to nothing before it trains.
  kept = run.norm_at_start / run.initial_norm
  for leaf, ratio, start in zip(run.names, kept, run.start):
    assert ratio > KEPT, (f'{name}: {leaf} holds {ratio:.3g} of its initial norm when it starts training at step '
                          f'{start} of {run.total_steps}')
  # Late groups start at the switch: not moved before it (weight decay would move them), moved by its step.
  for leaf, start, before, at in zip(run.names, run.start, run.moved_before_start, run.moved_at_start):
    if start > 0:
      assert not before and at, f'{name}: {leaf} moved before its start {start}: {before}; moved then: {at}'
  if trains_from is not None:  # the objective tells the optimizer the paper's switch
    assert run.late_starts == trains_from
  # Locked groups never move.
  assert np.array_equal(run.final_norm[run.locked], run.initial_norm[run.locked]), f'{name}: a locked group moved'
  # The learning-rate ramp ends where the paper puts it, and the schedule ends at its end value.
  schedule = optim.learning_rate_schedule(config.optim, config.total_steps)
  peak = config.optim.lr
  if name in PAPER_WARMUP:
    warmup = round(PAPER_WARMUP[name](config.total_steps))
    assert abs(config.optim.warmup_steps - warmup) <= 1, (name, config.optim.warmup_steps, warmup)
  if config.optim.warmup_steps:
    assert float(schedule(config.optim.warmup_steps - 1)) < peak
  np.testing.assert_allclose(float(schedule(config.optim.warmup_steps)), peak, rtol=1e-6)
  end = peak if config.optim.schedule == 'constant' else peak * config.optim.end_factor
  np.testing.assert_allclose(float(schedule(config.total_steps)), end, rtol=1e-5, atol=1e-12)
  # The logit scale: finite, within the objective's bound, and an imported one not clipped where none applies.
  if run.logit_scale:
    scale = run.logit_scale
    bound = math.inf if run.max_log_logit_scale is None else math.exp(run.max_log_logit_scale)
    assert 1.0 <= scale['min'] and scale['max'] <= bound * (1 + 1e-6), (name, scale)
    np.testing.assert_allclose(scale['after_first'], min(scale['initial'], bound), rtol=1e-3,
                               err_msg=f'{name}: the logit scale moved on the first step')
  return run


@pytest.mark.parametrize('name', [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow) for n in CONFIGS])
def test_the_whole_schedule_of_every_shipped_config(name):
  _check(name)


def test_simulated_groups_are_the_runs_own():
  """The small tree keeps each class of the real tree at its real path: SigLIP 2's heads, mask token and decoder,
  towers, logit scale and bias; a late group starts at the objective's switch."""
  config = _config('siglip2_shapes')
  objective, shapes = schedule_check.parameter_shapes(config)
  tree = schedule_check.small_tree(shapes, config.optim)
  assert set(tree) <= set(shapes)
  assert {'visual', 'siglip2_distill_head', 'siglip2_masked_head', 'siglip2_mask_token', 'locca_decoder',
          'logit_scale', 'logit_bias'} <= set(tree)
  assert set(tree) & {'token_embedding', 'positional_embedding', 'transformer', 'ln_final', 'text_projection'}
  assert objective.late_starts() == {k: round(0.8 * config.total_steps) for k in
                                     ('siglip2_distill_head', 'siglip2_masked_head', 'siglip2_mask_token')}


def test_an_imported_sigmoid_scale_survives_and_a_softmax_one_is_bounded():
  """A SigLIP run continued from released weights (scale 118) keeps its scale through the whole schedule; CLIP's
  objective bounds the same start at 100 (checked for a continued SigLIP and CLIP, on their real lengths)."""
  siglip = _config('siglip_shapes')
  run = schedule_check.simulate_schedule(siglip, initial_log_scale=math.log(118.0))
  np.testing.assert_allclose([run.logit_scale['after_first'], run.logit_scale['max']], 118.0, rtol=1e-3)
  clip = _config('clip_continue')
  assert objectives.OBJECTIVES.get(clip.objective.name).max_log_logit_scale == math.log(100.0)
  run = schedule_check.simulate_schedule(clip, initial_log_scale=math.log(118.0))
  assert run.logit_scale['after_first'] == pytest.approx(100.0, rel=1e-6) and run.logit_scale['max'] <= 100.0001


def test_locked_towers_and_layer_decay_keep_their_positions_and_never_move():
  """With a partly locked image tower and layer decay, the small tree keeps every block of each tower (the masks and
  multipliers count them) and the locked groups never move over the run."""
  config = _config('clip_shapes')
  config.optim.update(lock_image=True, lock_image_unlocked_groups=2, text_layer_decay=0.8)
  _, shapes = schedule_check.parameter_shapes(config)
  tree = schedule_check.small_tree(shapes, config.optim)
  for tower in groups.TOWERS:
    assert groups.num_blocks(tree, tower) == groups.num_blocks(shapes, tower)
  run = schedule_check.simulate_schedule(config)
  assert run.locked.any() and not run.locked.all()
  np.testing.assert_array_equal(run.final_norm[run.locked], run.initial_norm[run.locked])
  assert np.all(run.final_norm[~run.locked] != run.initial_norm[~run.locked])
