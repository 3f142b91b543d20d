"""The jaxpr FLOP count (vlp_jax/training/flops.py) that the GPU trainer's perf/mfu divides by: against counts
written out by hand, loops and branches included, against XLA's count of a real CLIP step on the CPU, and which count
`device_flops` takes on which platform."""
import jax
import jax.numpy as jnp
import pytest

from support import build_objective, micro_config, objective_batch
from vlp_jax import models, parallel
from vlp_jax.training.flops import function_flops, jaxpr_flops, traced_flops
from vlp_jax.training.state import create_train_state
from vlp_jax.training.flops import device_flops, program_cost
from vlp_jax.training.step import train_step


def test_a_batched_matmul_counts_two_flops_per_multiply_add():
  a, b = jnp.ones((3, 8, 16)), jnp.ones((3, 16, 5))
  assert function_flops(lambda x, y: jnp.einsum('bij,bjk->bik', x, y), a, b) == 2 * 3 * 8 * 16 * 5


def test_a_grouped_convolution_counts_its_window_and_input_features_per_group():
  x = jnp.ones((2, 10, 10, 6))  # NHWC
  kernel = jnp.ones((3, 3, 3, 4))  # HWIO with 2 groups: 3 input features per group, 4 outputs
  conv = lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC'),
                                                    feature_group_count=2)
  out_elements = 2 * 8 * 8 * 4
  assert function_flops(conv, x, kernel) == 2 * out_elements * (3 * 3) * 3


def test_loops_count_every_iteration_and_a_cond_its_costliest_branch():
  x, w = jnp.ones((4, 8)), jnp.ones((8, 8))
  one = 2 * 4 * 8 * 8

  def scanned(x, w):
    y, _ = jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=5)
    return y

  assert function_flops(scanned, x, w) == 5 * one
  branches = lambda p, x, w: jax.lax.cond(p, lambda: (x @ w) @ w, lambda: x + 1.0)
  assert function_flops(branches, True, x, w) == 2 * one
  assert jaxpr_flops(jax.make_jaxpr(branches)(True, x, w), branch=min) == 0  # the cheaper branch: x + 1


def test_the_gradient_counts_forward_backward_and_remat_recomputation():
  x, w = jnp.ones((4, 8)), jnp.ones((8, 8))
  one = 2 * 4 * 8 * 8
  loss = lambda w: jnp.sin(x @ w).sum()
  # forward, then two matmuls of the same size in the backward pass (only w's gradient is asked for: one)
  assert function_flops(jax.grad(loss), w) == 2 * one
  assert function_flops(jax.grad(jax.checkpoint(loss)), w) == 3 * one  # the forward matmul again in the backward


@pytest.fixture(scope='module')
def tiny_step():
  """(traced, compiled) CLIP train step of the tiny preset at batch 8 (its widths of 128 to 256 are the narrowest at
  which matmuls still dominate: in the test-suite's micro model, width 32, XLA's count is 8 times the matmuls')."""
  config = micro_config('')
  config.model = models.preset('tiny')
  objective, tx = build_objective(config)
  state = jax.eval_shape(lambda r: create_train_state(objective, tx, r), jax.random.key(0))
  batch = {k: v for k, v in objective_batch(config, 8).items() if k in ('image', 'text')}
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  with jax.set_mesh(mesh):
    traced = jax.jit(lambda s, b, r: train_step(objective, tx, s, b, r)).trace(state, batch, jax.random.key(1))
    compiled = traced.lower().compile()
  return traced, compiled


@pytest.mark.slow
def test_a_clip_step_counts_the_matmuls_that_dominate_xlas_count(tiny_step):
  traced, compiled = tiny_step
  ours, xla = traced_flops(traced), program_cost(compiled)['flops']
  # XLA also counts elementwise work (LayerNorm, GELU, softmax, AdamW): more, never less (ViT-B/16: 0.3% more)
  assert 0.75 * xla < ours < xla


def test_device_flops_takes_the_jaxpr_count_on_a_gpu_split_over_devices(tiny_step):
  traced, compiled = tiny_step
  assert device_flops(traced, compiled, 'gpu', 4) == traced_flops(traced) / 4
  assert device_flops(traced, compiled, 'cpu', 1) == program_cost(compiled)['flops']
  assert device_flops(traced, compiled, 'tpu', 4) == program_cost(compiled)['flops']  # already per device
