"""`Experiment.from_config` (training/experiment.py), the one way a run is built: its state and step are those the
pieces give when put together by hand, its shardings on 8 devices are the fsdp rule's, a resolution stage gets the
stage's model, and a bad config is refused before anything is built."""
import chex
import jax
import numpy as np
import pytest

from support import random_batches
from vlp_jax import models, objectives, parallel
from vlp_jax.config import ConfigError, base_config
from vlp_jax.training import Experiment
from vlp_jax.training import experiment as experiment_module
from vlp_jax.training.optim import learning_rate_schedule, make_optimizer
from vlp_jax.training.state import EmaTrainState, create_train_state
from vlp_jax.training.step import compile_train_step


def test_the_state_and_a_step_are_those_of_the_pieces_put_together_by_hand(micro):
  micro.ema.decay = 0.9  # the EMA is part of the state and of the step: left out, the trees differ
  mesh = parallel.make_mesh()
  run = Experiment.from_config(micro, mesh)
  objective = objectives.build(micro, models.build_model(micro.model))
  tx = make_optimizer(micro.optim, micro.total_steps, objective.late_starts())
  shardings = parallel.tree_shardings(jax.eval_shape(lambda r: create_train_state(objective, tx, r, 0.9),
                                                     jax.random.key(0)), mesh, micro.mesh.fsdp_min_size)
  rng = jax.random.key(3)
  want = jax.jit(lambda r: create_train_state(objective, tx, r, 0.9), out_shardings=shardings)(rng)
  got = run.init_state(rng)
  assert isinstance(got, EmaTrainState)
  chex.assert_trees_all_equal(jax.device_get(got), jax.device_get(want))
  batch = parallel.global_batch(random_batches(micro, 1)[0], mesh)
  by_hand = compile_train_step(objective, tx, mesh, shardings, ema_decay=0.9)
  want_state, want_metrics = by_hand(want, batch, jax.random.key(1))
  got_state, got_metrics = run.compiled_step()(got, batch, jax.random.key(1))
  chex.assert_trees_all_equal(jax.device_get(got_metrics), jax.device_get(want_metrics))
  chex.assert_trees_all_equal(jax.device_get(got_state), jax.device_get(want_state))
  schedule = learning_rate_schedule(micro.optim, micro.total_steps)
  assert [float(run.schedule(s)) for s in range(6)] == [float(schedule(s)) for s in range(6)]
  assert run.parameter_count == sum(x.size for x in jax.tree.leaves(got_state.params))


def test_the_shardings_on_eight_devices_are_the_fsdp_rules(micro):
  micro.mesh.fsdp, micro.mesh.fsdp_min_size = 8, 256  # the micro model's matrices are split over the 8 devices
  run = Experiment.from_config(micro)
  assert jax.device_count() == 8 and dict(run.mesh.shape) == {'data': 1, 'fsdp': 8}
  objective = objectives.build(micro, models.build_model(micro.model))
  tx = make_optimizer(micro.optim, micro.total_steps)
  shapes = jax.eval_shape(lambda r: create_train_state(objective, tx, r), jax.random.key(0))
  want = parallel.tree_shardings(shapes, run.mesh, 256)
  assert jax.tree.leaves(run.state_shardings) == jax.tree.leaves(want)
  specs = {s.spec for s in jax.tree.leaves(run.state_shardings)}
  assert jax.sharding.PartitionSpec() in specs and len(specs) > 1  # some leaves split, some replicated
  abstract = run.abstract_state
  assert [a.sharding for a in jax.tree.leaves(abstract)] == jax.tree.leaves(want)
  assert [a.shape for a in jax.tree.leaves(abstract)] == [a.shape for a in jax.tree.leaves(shapes)]


def test_a_resolution_stage_gets_its_model_and_the_run_keeps_its_config():
  config = base_config()  # the tiny model: 32 px, patch 8
  config.total_steps = 8
  config.data.resolution_stages = ((0.0, 16), (0.75, 32))
  first, resumed = Experiment.from_config(config, step=0), Experiment.from_config(config, step=7)
  assert first.config is config and first.stage.model.vision.image_size == 16 and first.model.vision.image_size == 16
  assert resumed.stage is config and resumed.model.vision.image_size == 32
  first_embedding = first.state_shapes.params['visual']['positional_embedding'].shape
  assert first_embedding[0] == (16 // 8) ** 2 + 1
  assert resumed.state_shapes.params['visual']['positional_embedding'].shape[0] == (32 // 8) ** 2 + 1


def test_a_bad_config_is_refused_before_anything_is_built(micro, monkeypatch):
  monkeypatch.setattr(experiment_module.models, 'build_model', lambda *a: pytest.fail('built the model first'))
  micro.batch_size = 12
  with pytest.raises(ConfigError, match=r'config.batch_size=12 must be divisible by the device count 8'):
    Experiment.from_config(micro)
  micro.batch_size = 16
  micro.optim.lr = -1.0
  with pytest.raises(ConfigError, match=r'config.optim.lr must be positive'):
    Experiment.from_config(micro, parallel.make_mesh(1, jax.devices()[:1]))


def test_inputs_the_trainer_finds_are_not_the_constructors_to_check(micro):
  # a continued run's checkpoint is read by the trainer; the step's shapes do not depend on it
  micro.init.require_checkpoint = True
  run = Experiment.from_config(micro)
  assert np.shape(run.state_shapes.params['logit_scale']) == ()
  micro.batch_size = 12  # validate=False: a config taken as it is (a stand-in mesh, a test's one check)
  assert Experiment.from_config(micro, validate=False).config.batch_size == 12
