"""configs/siglip2_continue_shapes.py (configs/siglip2_continue.py at small scale): a run initialised from a SigLIP
checkpoint holds its towers, MAP head included where the tower has one, and its logit scale and bias bit for bit at
step 0; LocCa's decoder, the self-distillation heads and the mask token are the fresh initialisation's; the EMA
teacher starts as the loaded image tower (the late losses run from step 0); the log says what is loaded and what is
fresh."""
import os

import chex
import jax
import numpy as np
import pytest

from support import ROOT
from vlp_jax import interchange, models, objectives, parallel
from vlp_jax.config import from_file
from vlp_jax.objectives.siglip2 import ACTIVE, DECODER, DISTILL_HEAD, MASK_TOKEN, MASKED_HEAD, TEACHER
from vlp_jax.training import Experiment
from vlp_jax.training.loop import build_state


def _config(name):
  return from_file(os.path.join(ROOT, 'configs', f'{name}.py'))


@pytest.mark.slow
def test_towers_come_from_the_checkpoint_and_the_decoder_heads_and_teacher_start_fresh(tmp_path, capsys):
  released = _config('siglip_shapes')  # stands in for an imported SigLIP 2: its towers, scale and bias
  released.model.vision.layers = released.model.text.layers = 1  # fast to initialise; the continued run matches
  source = objectives.build(released, models.build_model(released.model))
  saved, _ = jax.tree.map(np.asarray, source.init_variables(jax.random.key(7)))
  checkpoint = interchange.save_checkpoint(str(tmp_path / 'released'), saved, {}, released)

  config = _config('siglip2_continue_shapes')
  config.model.vision.layers = config.model.text.layers = 1
  config.init.checkpoint = checkpoint
  run = Experiment.from_config(config, parallel.make_mesh())
  objective, init_rng = run.objective, jax.random.key(0)
  state = build_state(run, init_rng, None, None, None)
  log = capsys.readouterr().out
  params, model_state = jax.device_get(state.params), jax.device_get(state.model_state)
  assert int(state.step) == 0
  chex.assert_trees_all_equal({k: params[k] for k in saved}, saved)  # towers, MAP head, scale and bias: loaded
  fresh_params, _ = jax.tree.map(np.asarray, objective.init_variables(init_rng))
  new = (DECODER, DISTILL_HEAD, MASKED_HEAD, MASK_TOKEN)
  assert set(params) == set(saved) | set(new)
  chex.assert_trees_all_equal({k: params[k] for k in new}, {k: fresh_params[k] for k in new})
  # the teacher: the loaded image tower and the fresh heads, on from step 0
  chex.assert_trees_all_equal(model_state[TEACHER], {'visual': saved['visual'], DISTILL_HEAD: params[DISTILL_HEAD],
                                                     MASKED_HEAD: params[MASKED_HEAD]})
  assert int(model_state[ACTIVE]) == 1
  assert not np.array_equal(fresh_params['visual']['conv1']['kernel'], saved['visual']['conv1']['kernel'])
  line = next(line for line in log.splitlines() if line.startswith('Initialised from'))
  loaded, fresh = line.split(': loaded ', 1)[1].split('; fresh: ')
  assert loaded.split(', ') == sorted(saved)
  assert set(new) | {TEACHER, ACTIVE} <= set(fresh.split(', '))
