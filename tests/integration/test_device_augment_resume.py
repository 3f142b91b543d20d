"""config.data.augment_on='device' keeps resumption exact: COSMOS, and SigLIP 2 across its switch, with their crops
made in the train step, N steps in one run == N/2 steps, stop, resume, N/2 more (the same parameters, optimizer
state, losses and data state), as test_resume.py checks for host-made views."""
import json

import chex
import pytest

from vlp_jax import parallel
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

pytestmark = pytest.mark.slow  # two short training runs


def _losses(workdir):
  return {r['step']: r['train/loss'] for r in read_metrics(workdir) if 'train/loss' in r}


# objective -> its options for a small run (SigLIP 2's late losses and views from step 3: the resumed half crosses
# the switch)
OPTIONS = {'cosmos': {'num_local_crops': 2, 'num_local_texts': 1, 'local_crop_size': 8, 'local_text_context_length': 8,
                      'cross_attention_heads': 4},
           'siglip2': {'num_local_crops': 2, 'local_crop_size': 8, 'head_hidden_dim': 16, 'head_bottleneck_dim': 8,
                       'head_prototypes': 16, 'distill_start_fraction': 0.75}}


@pytest.mark.parametrize('name', sorted(OPTIONS))
def test_a_resumed_run_with_device_crops_is_the_uninterrupted_run(micro, tmp_path, name):
  micro.objective.update({'name': name, **OPTIONS[name]})
  micro.data.augment_on, micro.data.device_source_size = 'device', 24
  micro.total_steps, micro.checkpoint.every_steps, micro.eval.every_steps = 4, 2, 100
  micro.eval.tasks = ('zeroshot',)
  micro.checkpoint.async_save = False
  full, split = str(tmp_path / 'full'), str(tmp_path / 'split')
  whole = train_and_evaluate(micro, full)
  assert train_and_evaluate(micro, split, stop_at_step=2)['step'] == 2
  resumed = train_and_evaluate(micro, split)
  assert int(resumed['state'].step) == int(whole['state'].step) == 4
  for part in ('params', 'opt_state', 'model_state'):
    chex.assert_trees_all_equal(parallel.to_host(getattr(resumed['state'], part)),
                                parallel.to_host(getattr(whole['state'], part)))
  assert _losses(split) == _losses(full) and len(_losses(full)) == 2
  states = [json.loads(open(f'{run}/checkpoints/4/data/process_0-of-1.json').read()) for run in (split, full)]
  assert states[0] == states[1]
  if name == 'siglip2':  # the resumed half crossed the switch: the late losses ran on the views the step rendered
    late = [r for r in read_metrics(split) if 'train/distill_loss' in r][-1]
    assert late['train/distill_active'] > 0 and late['train/distill_loss'] > 0
