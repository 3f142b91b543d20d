"""The jitted train step: 8 devices (data and fsdp meshes) equal 1 device; AdamW masks; the logit-scale clamp."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import assert_trained_params_close, initial_state, run_steps
from vlp_jax import parallel
from vlp_jax.training import optim
from vlp_jax.training.flops import program_cost
from vlp_jax.training.progress import Progress
from vlp_jax.training.step import CompiledStep


def _resnet(config):
  """A micro ResNet tower: BatchNorm statistics must be those of the global batch, whatever the sharding."""
  config.model.vision.update(type='resnet', image_size=32, width=8, heads=2, stages=(1, 1, 1, 1))
  return config


@pytest.mark.slow
# One test per tower, so that the ViT's two meshes (data parallel; fsdp 2 x data 4) share one single-device run.
@pytest.mark.parametrize('tower,fsdps', [('vit', (1, 2)), ('resnet', (1,))], ids=['vit', 'resnet'])
def test_eight_devices_equal_one(micro, tower, fsdps):
  if tower == 'resnet':
    micro = _resnet(micro)
  micro.mesh.fsdp_min_size = 256  # small enough that the micro model's matrices are fsdp-sharded
  initial = initial_state(micro)
  want_params, want_losses, want = run_steps(micro, parallel.make_mesh(1, jax.devices()[:1]), state=initial)
  want_state = parallel.to_host(want.model_state)
  if tower == 'vit':
    assert want_losses[-1] < want_losses[0]  # it learns
  for fsdp in fsdps:
    mesh = parallel.make_mesh(fsdp)
    got_params, got_losses, state = run_steps(micro, mesh, state=initial)
    assert mesh.devices.size == 8
    if fsdp > 1:  # the rule really sharded something
      specs = [s.spec for s in jax.tree.leaves(jax.tree.map(lambda x: x.sharding, state.params))]
      assert any('fsdp' in spec for spec in specs)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, err_msg=f'fsdp={fsdp}')
    if tower == 'resnet':  # running statistics moved, identically on 8 devices and on 1
      chex.assert_trees_all_close(parallel.to_host(state.model_state), want_state, rtol=1e-4, atol=1e-6)
      assert np.abs(want_state['batch_stats']['visual']['bn1']['mean']).max() > 1e-3
    assert_trained_params_close(got_params, want_params)


@pytest.mark.slow
def test_logit_scale_is_clamped_after_each_step(micro):
  # The micro model's initial state (the init program other tests compile, in the session's cache) with the scale
  # at its bound ln(100), as config.model.init_logit_scale would set it.
  initial = initial_state(micro)
  initial = initial.replace(params={**initial.params, 'logit_scale': np.float32(np.log(100.0))})
  micro.optim.lr = 0.5  # a huge step would push the scale past ln(100) without the clamp
  micro.optim.warmup_steps = 0
  params, _, _ = run_steps(micro, parallel.make_mesh(1, jax.devices()[:1]), steps=2, state=initial)
  assert 0.0 <= float(params['logit_scale']) <= np.log(100.0) + 1e-6


def test_weight_decay_mask():
  params = {'kernel': jnp.ones((3, 4)), 'bias': jnp.ones(4), 'logit_scale': jnp.ones(()),
            'ln': {'scale': jnp.ones(4)}, 'class_embedding': jnp.ones(4), 'positional_embedding': jnp.ones((5, 4))}
  mask = optim.weight_decay_mask(params)
  assert mask == {'kernel': True, 'bias': False, 'logit_scale': False, 'ln': {'scale': False},
                  'class_embedding': False, 'positional_embedding': True}


def test_schedule_warmup_then_cosine(micro):
  micro.optim.update(lr=1e-3, warmup_init_lr=1e-4, warmup_steps=10)
  schedule = optim.learning_rate_schedule(micro.optim, 100)
  np.testing.assert_allclose([schedule(0), schedule(10), schedule(100)], [1e-4, 1e-3, 0.0], atol=1e-9)
  assert schedule(5) < schedule(10) and schedule(55) < schedule(10)
  micro.optim.schedule = 'constant'
  schedule = optim.learning_rate_schedule(micro.optim, 100)
  np.testing.assert_allclose([schedule(10), schedule(99)], [1e-3, 1e-3], rtol=1e-6)


def test_param_sharding_rule():
  assert parallel.param_spec((1024, 512), 4, 2**10) == jax.sharding.PartitionSpec('fsdp', None)
  assert parallel.param_spec((6, 512), 4, 2**10) == jax.sharding.PartitionSpec(None, 'fsdp')
  assert parallel.param_spec((16,), 4, 2**10) == jax.sharding.PartitionSpec()  # too small
  assert parallel.param_spec((1024, 512), 1, 2**10) == jax.sharding.PartitionSpec()


def test_program_cost_counts_the_flops_of_a_matmul():
  a, b = jnp.ones((8, 16)), jnp.ones((16, 4))
  assert program_cost(jax.jit(jnp.dot).lower(a, b).compile())['flops'] == 2 * 8 * 16 * 4


def test_compiled_step_runs_the_program_it_compiled_and_scales_its_flops_by_micro_batches():
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  jitted = jax.jit(lambda state, batch, rng: (state @ batch, {}))
  state, batch = jnp.ones((8, 16)), jnp.ones((16, 4))
  for num_micro in (1, 3):
    step = CompiledStep(jitted, mesh, num_micro)
    assert step.flops is None  # nothing compiled yet
    out, _ = step(state, batch, jax.random.key(0))
    np.testing.assert_array_equal(out, np.full((8, 4), 16.0))
    assert step.flops == num_micro * 2 * 8 * 16 * 4


def test_progress_reports_the_steps_flops_and_the_tflops_per_device():
  progress = Progress(total_steps=10, batch_size=4, start_step=0, device_flops=2e12, devices=8)
  progress.last_time -= 2.0  # two seconds for the steps below
  logged = progress.tick(4)
  assert logged['perf/step_flops'] == 8 * 2e12
  assert logged['perf/device_tflops_per_sec'] == pytest.approx(2.0 * 4 / 2.0, rel=1e-3)  # 2 TFLOP x 2 steps/s
  assert 'perf/step_flops' not in Progress(10, 4, 0).tick(0) | Progress(10, 4, 0).tick(1)


def test_compiled_step_compiles_again_for_a_batch_of_other_types():
  step = CompiledStep(jax.jit(lambda state, batch, rng: (state + batch['x'].astype(jnp.float32).sum(), {})),
                      parallel.make_mesh(1, jax.devices()[:1]))
  assert float(step(jnp.float32(1), {'x': jnp.ones(3, jnp.uint8)}, jax.random.key(0))[0]) == 4.0
  assert float(step(jnp.float32(1), {'x': jnp.full(3, 0.5, jnp.float32)}, jax.random.key(0))[0]) == 2.5
  assert len(step.compiled) == 2
