"""The EMA of the weights (config.ema.decay, training/ema.py): a numpy reference over the parameters of every step,
under decoupled accumulation and (without it) with scanned, partly locked towers; nothing changes with it off; the
parameters' shardings; the config check; checkpoints with and without it (resume, load, export, layouts)."""
import math

import chex
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from vlp_jax import errors, parallel
from vlp_jax.checkpoint_files import has_ema, load_variables
from vlp_jax import interchange as weights
from vlp_jax.config import validate
from vlp_jax.models.transformer import stacked_layout
from vlp_jax.training import ema as ema_lib
from vlp_jax.training.loop import check_resume_layout
from vlp_jax.training.state import EmaTrainState, TrainState, create_train_state, with_ema

from support import build_objective, compiled_step, initial_state, micro_config, optimised_compiles, random_batches

DECAY = 0.75


def _sharded(config, fsdp=2):
  """config on an 8-device mesh whose fsdp rule splits the micro model's matrices."""
  config.mesh.fsdp, config.mesh.fsdp_min_size = fsdp, 256
  return config, parallel.make_mesh(fsdp)


def _train(config, mesh, steps, state=None):
  """(host parameters before and after each step, the final state, each step's host metrics), from `state` (host or
  placed arrays; config's initial state if None)."""
  step_fn, state = compiled_step(config, mesh, state)
  params, metrics = [parallel.to_host(state.params)], []
  for batch in random_batches(config, steps):
    state, step_metrics = step_fn(state, parallel.global_batch(batch, mesh), jax.random.key(1))
    params.append(parallel.to_host(state.params))
    metrics.append(parallel.to_host(step_metrics))
  return params, state, metrics


def _numpy_ema(params_per_step, decay):
  """ema_0 = params_0; ema_t = decay * ema_{t-1} + (1 - decay) * params_t, in float32."""
  ema = params_per_step[0]
  for params in params_per_step[1:]:
    ema = jax.tree.map(lambda e, p: np.float32(decay) * e + np.float32(1 - decay) * p, ema, params)
  return ema


def _largest_difference(a, b) -> float:
  return max(float(np.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _scanned_partly_locked(config):
  config.model.scan_layers = True
  config.model.vision.layers = config.model.text.layers = 3  # blocks 0 and 1 stacked, block 2 apart
  config.optim.lock_image, config.optim.lock_image_unlocked_groups = True, 3  # block 1 and above train
  return config


def _decoupled(config):
  config.accumulation.mode, config.accumulation.micro_batch_size = 'decoupled', 8
  return config


@pytest.fixture(scope='module')
def plain_runs(data_cache):
  """{'off': ..., 'on': ...}: (host parameters before and after each step, the final state, each step's metrics) of
  3 steps of the micro model without and with the EMA, under decoupled accumulation, on the same sharded mesh. Both
  start from one jitted init (the EMA's is a host copy of the parameters, as `with_ema` makes it). Both steps compile
  with XLA's optimisations, as a user's run: unoptimised (the unit tests' compile, conftest.UNOPTIMISED_FOLDERS) the
  two programs round differently (jax 0.10.2, x86 CPU: entries 1 ulp apart by the second step, which Adam grows to
  1e-7 in near-zero biases by the third), optimised they agree bit for bit."""
  off = initial_state(micro_config(data_cache))
  runs = {}
  with optimised_compiles():
    for name, decay in (('off', 0.0), ('on', DECAY)):
      config = _decoupled(micro_config(data_cache))
      config.ema.decay = decay
      runs[name] = _train(*_sharded(config), steps=3, state=with_ema(off, decay))
  return runs


def _check_against_reference(params, state):
  """The EMA of `state` after len(params) - 1 steps against the numpy reference of those steps' parameters."""
  assert isinstance(state, EmaTrainState)
  ema = parallel.to_host(state.ema)
  # One update per optimizer step from the parameters it wrote (a per-micro-batch update would not match), to an ulp
  # or so: XLA may fuse the product and the sum.
  chex.assert_trees_all_close(ema, _numpy_ema(params, DECAY), rtol=1e-6, atol=1e-7)
  chex.assert_trees_all_equal_dtypes(ema, params[-1])
  # Neither the initial parameters nor the last ones, so the comparison above tells them apart.
  assert _largest_difference(ema, params[0]) > 1e-5 and _largest_difference(ema, params[-1]) > 1e-5
  # Sharded as the parameters, also after the step.
  shardings = lambda tree: jax.tree.map(lambda x: x.sharding, tree)  # noqa: E731
  assert shardings(state.ema) == shardings(state.params)


@pytest.mark.slow
def test_the_ema_equals_a_numpy_reference_of_the_parameters_of_each_step_under_accumulation(plain_runs):
  params, state, _ = plain_runs['on']  # one EMA update per optimizer step, not per micro-batch
  _check_against_reference(params, state)


@pytest.fixture(scope='module')
def scanned_sharded(data_cache):
  """(config, mesh, the state's shardings, the initial state jitted onto them) of the micro model with the EMA and
  scanned, partly locked towers on a 2 x 4 fsdp mesh, whose fsdp rule splits the model's matrices: one init for the
  two tests below."""
  config = micro_config(data_cache)
  config.ema.decay = DECAY  # without accumulation: the plain step
  config, mesh = _sharded(_scanned_partly_locked(config), fsdp=4)
  objective, tx = build_objective(config)
  abstract = jax.eval_shape(lambda r: create_train_state(objective, tx, r, config.ema.decay), jax.random.key(0))
  shardings = parallel.tree_shardings(abstract, mesh, config.mesh.fsdp_min_size)  # as the loop shards the state
  # LLVM at level 1, as support.jit_init: the same bits, a third of the compile time.
  state = jax.jit(lambda r: create_train_state(objective, tx, r, config.ema.decay), out_shardings=shardings,
                  compiler_options={'xla_backend_optimization_level': 1})(jax.random.key(0))
  return config, mesh, shardings, state


@pytest.mark.slow
def test_the_ema_equals_the_reference_with_scanned_partly_locked_towers(scanned_sharded):
  config, mesh, _, initial = scanned_sharded
  # A host copy: the step donates its input state, which the other test of the fixture reads.
  params, state, _ = _train(config, mesh, steps=3, state=parallel.to_host(initial))
  _check_against_reference(params, state)


@pytest.mark.slow
def test_with_the_ema_off_training_is_as_before_and_the_state_has_no_ema(plain_runs, micro, tmp_path):
  off_params, off_state, off_metrics = plain_runs['off']
  on_params, on_state, on_metrics = plain_runs['on']
  # The EMA never feeds back: parameters, optimizer state and metrics are bit-identical with and without it.
  chex.assert_trees_all_equal(off_params, on_params)
  chex.assert_trees_all_equal(parallel.to_host(off_state.opt_state), parallel.to_host(on_state.opt_state))
  assert off_metrics == on_metrics
  # Off, the state is the plain TrainState (its leaves as before), so checkpoints keep their layout.
  assert type(off_state) is TrainState and not hasattr(off_state, 'ema')
  assert len(jax.tree.leaves(on_state)) == len(jax.tree.leaves(off_state)) + len(jax.tree.leaves(off_state.params))
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(str(tmp_path / 'off'), off_state)
  checkpointer.wait_until_finished()
  assert set(checkpointer.metadata(str(tmp_path / 'off')).item_metadata) == {'step', 'params', 'model_state',
                                                                           'opt_state'}
  # No EMA variant to evaluate, so no ema_* metric.
  objective, _ = build_objective(micro)
  assert list(ema_lib.eval_variants(objective, off_params[-1], {})) == ['']
  assert list(ema_lib.eval_variants(objective, on_params[-1], {}, parallel.to_host(on_state.ema))) == ['', 'ema_']


@pytest.mark.slow
def test_the_ema_has_the_parameters_shardings_on_an_eight_device_mesh(scanned_sharded):
  _, mesh, shardings, state = scanned_sharded
  assert mesh.devices.size == 8
  assert shardings.ema == shardings.params
  specs = [s.spec for s in jax.tree.leaves(shardings.ema)]
  assert any('fsdp' in spec for spec in specs) and any(spec == jax.sharding.PartitionSpec() for spec in specs)
  assert jax.tree.map(lambda x: x.sharding, state.ema) == jax.tree.map(lambda x: x.sharding, state.params)
  chex.assert_trees_all_equal(parallel.to_host(state.ema), parallel.to_host(state.params))  # it starts at them


@pytest.mark.parametrize('decay', [1.0, -0.1, math.nan, 2])
def test_a_decay_outside_0_1_names_the_key(micro, decay):
  micro.ema.decay = decay
  with pytest.raises(errors.ConfigError, match=r'config\.ema\.decay must be in \[0, 1\)'):
    validate(micro)


def _save(path, config, params, ema=None):
  """A checkpoint step directory as training writes it: {step, params, model_state[, ema]} and the config."""
  state = {'step': np.zeros((), np.int32), 'params': params, 'model_state': {}, **({'ema': ema} if ema else {})}
  checkpointer = ocp.Checkpointer(ocp.CompositeCheckpointHandler('state', 'config'))
  checkpointer.save(path, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                  config=ocp.args.JsonSave(config.to_dict())))
  checkpointer.close()
  return path


def _scanned_checkpoint(tmp_path, micro, shift=0.5):
  """A checkpoint of the micro model in the scanned layout whose EMA is its parameters + shift; and the unrolled
  parameters."""
  unrolled = micro.copy_and_resolve_references()
  unrolled.model.vision.layers = unrolled.model.text.layers = 3
  params = initial_state(unrolled).params
  micro.model.vision.layers = micro.model.text.layers = 3
  micro.model.scan_layers, micro.ema.decay = True, DECAY
  ema = jax.tree.map(lambda p: p + np.float32(shift), params)
  return _save(str(tmp_path / 'scanned'), micro, stacked_layout(params), stacked_layout(ema)), unrolled, params, ema


@pytest.mark.slow
def test_export_and_load_of_the_ema_convert_the_scanned_layout(micro, tmp_path):
  checkpoint, unrolled, params, ema = _scanned_checkpoint(tmp_path, micro)
  assert has_ema(checkpoint)
  chex.assert_trees_all_equal(load_variables(checkpoint, ema=True)[0], stacked_layout(ema))
  chex.assert_trees_all_equal(load_variables(checkpoint)[0], stacked_layout(params))
  # `export --ema` writes the EMA's towers, named block by block like the parameters' export.
  weights.export_weights('open_clip', checkpoint, str(tmp_path / 'ema.safetensors'), ema=True)
  plain = _save(str(tmp_path / 'plain'), unrolled, ema)  # the EMA as the parameters of an unrolled checkpoint
  want = weights.read_state_dict(weights.export_weights('open_clip', plain, str(tmp_path / 'want.safetensors')))
  got = weights.read_state_dict(str(tmp_path / 'ema.safetensors'))
  assert 'transformer.resblocks.1.attn.in_proj_weight' in got
  chex.assert_trees_all_equal(got, want)


def test_a_checkpoint_without_an_ema_refuses_to_give_one_and_to_resume_with_one(micro, tmp_path):
  params = initial_state(micro).params
  checkpoint = _save(str(tmp_path / 'plain'), micro, params)
  assert not has_ema(checkpoint)
  with pytest.raises(errors.ConfigError, match='holds no EMA of the weights.*config.ema.decay > 0'):
    load_variables(checkpoint, ema=True)
  with pytest.raises(errors.ConfigError, match='holds no EMA'):
    weights.export_weights('open_clip', checkpoint, str(tmp_path / 'x.safetensors'), ema=True)
  # The EMA is kept from the first step or not at all: resuming with the other setting is refused by name.
  check_resume_layout(checkpoint, micro.model, 0.0)
  with pytest.raises(errors.ConfigError, match=r'config\.ema\.decay=0\.0 and this run has config\.ema\.decay=0\.9'):
    check_resume_layout(checkpoint, micro.model, 0.9)
  micro.ema.decay = DECAY
  with_ema = _save(str(tmp_path / 'ema'), micro, params, params)
  with pytest.raises(errors.ConfigError,
                     match=r'decay=0\.75 and this run has config\.ema\.decay=0\.0.*a decay in \(0, 1\)'):
    check_resume_layout(with_ema, micro.model, 0.0)
