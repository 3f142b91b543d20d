"""The jitted train step: features -> loss -> gradient -> AdamW -> logit-scale clamp (-> the weights' EMA), sharded
over the mesh."""
from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from vlp_jax import errors, hardware, parallel
from vlp_jax import accumulation
from vlp_jax.training import ema as ema_lib
from vlp_jax.training.flops import device_flops, program_cost, program_memory, traced_flops
from vlp_jax.training.optim import clamp_logit_scales
from vlp_jax.training.state import TrainState, create_train_state


def train_step(objective, tx: optax.GradientTransformation, state: TrainState, batch: dict[str, jax.Array],
               rng: jax.Array, mode: str = 'none', num_micro: int = 1, ema_decay: float = 0.0
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  """One optimisation step on a global batch, its gradient computed whole or in `num_micro` micro-batches
  (`mode`, see vlp_jax/accumulation.py), then, with `ema_decay` > 0 (config.ema.decay; `state` an EmaTrainState),
  the EMA of the parameters moved towards the new ones (training/ema.py). Pure; the rng for this step is
  fold_in(rng, step)."""
  step_rng = jax.random.fold_in(rng, state.step)
  loss_and_grad = accumulation.loss_and_grad_fn(mode, num_micro)
  loss, metrics, model_state, grads = loss_and_grad(objective, state.params, state.model_state, batch, step_rng,
                                                    state.step)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = clamp_logit_scales(optax.apply_updates(state.params, updates), objective.max_log_logit_scale)
  model_state = objective.after_step(params, model_state, state.step)
  grad_norm = optax.tree.norm(grads)
  # A non-finite loss or gradient skips the update: parameters, optimizer and model state stay as they were (the
  # step counter and the data still move on). The loop counts these and stops after too many in a row.
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
  metrics = {'loss': loss, 'grad_norm': grad_norm, 'nonfinite': 1.0 - finite.astype(jnp.float32), **metrics}
  new = {'step': state.step + 1, 'params': keep(params, state.params),
         'model_state': keep(model_state, state.model_state), 'opt_state': keep(opt_state, state.opt_state)}
  if ema_decay:  # a skipped step is no optimizer step: the EMA stays as it was too
    new['ema'] = keep(ema_lib.update(state.ema, params, ema_decay), state.ema)
  return state.replace(**new), metrics


def jit_train_step(objective, tx: optax.GradientTransformation, mesh: Mesh, state_shardings: Any,
                   mode: str = 'none', num_micro: int = 1, ema_decay: float = 0.0):
  """The jitted step with explicit shardings: the state as given (replicated or fsdp), the batch split over every
  device, metrics replicated; the input state is donated. Call, lower or compile it under `jax.set_mesh(mesh)`
  (benchmarks/aot.py lowers it for TPU topologies without running it)."""
  return jax.jit(
      lambda state, batch, rng: train_step(objective, tx, state, batch, rng, mode, num_micro, ema_decay),
      in_shardings=(state_shardings, parallel.batch_sharding(mesh), parallel.replicated(mesh)),
      out_shardings=(state_shardings, parallel.replicated(mesh)),
      donate_argnums=0)


def check_memory(needed: int | None, mesh: Mesh) -> None:
  """ConfigError when a compiled step that holds `needed` bytes per device cannot fit this process's devices."""
  if needed is None:
    return
  local_devices = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
  device, local = local_devices[0], len(local_devices)  # another process's devices tell this one nothing
  stats = device.memory_stats() or {}
  shortfall = hardware.memory_shortfall(needed, local, device.platform, stats.get('bytes_limit'),
                                        hardware.host_memory_bytes())
  if shortfall:
    raise errors.ConfigError(f'the compiled train step {shortfall}: lower config.batch_size, accumulate gradients '
                             "(config.accumulation.mode='decoupled' with micro_batch_size), or shard the weights "
                             '(config.mesh.fsdp), then rerun')


class CompiledStep:
  """`jit_train_step` compiled ahead of time on its first call, run under the mesh. `flops` is XLA's count of
  floating-point operations of one step on one device (flops.device_flops; None before the first call or where the
  backend gives none). On CPU and TPU, XLA counts a loop body once, so with accumulation over `num_micro`
  micro-batches the count is scaled by `num_micro` (nearly all the work is in those loops, as benchmarks/aot.py), and
  a scanned model (`unrolled_flops` given) adds the blocks the count of its layer loop leaves out; the GPU's count
  (from the jaxpr) has every loop in full already."""

  def __init__(self, jitted, mesh: Mesh, num_micro: int = 1, unrolled_flops=None, architecture=None):
    self.jitted, self.mesh, self.num_micro, self.unrolled_flops = jitted, mesh, num_micro, unrolled_flops
    self.architecture = architecture  # an UnrolledFlops of flops.architecture_config's step, or None
    self.compiled: dict = {}  # one program per batch signature (the loop's batches all share one)
    self.flops: float | None = None
    self.counted_architecture: float | None = None
    self.memory: int | None = None  # bytes per device while the step runs (flops.program_memory)
    self.compile_seconds: float | None = None  # the wall time of the last trace, lowering and compilation

  def __call__(self, state: TrainState, batch: dict, rng: jax.Array) -> tuple[TrainState, dict]:
    signature = (jax.tree.structure(batch), tuple((x.shape, str(x.dtype)) for x in jax.tree.leaves(batch)))
    with jax.set_mesh(self.mesh):  # lets the losses place row-sharding constraints on logit matrices
      if signature not in self.compiled:
        began = time.perf_counter()
        traced = self.jitted.trace(state, batch, rng)
        lowered = traced.lower()
        self.compiled[signature] = lowered.compile()
        self.compile_seconds = time.perf_counter() - began
        self.memory = program_memory(self.compiled[signature])
        check_memory(self.memory, self.mesh)  # before running: a step that cannot fit stops with the figures
        if self.flops is None:
          platform = self.mesh.devices.flat[0].platform
          flops = device_flops(traced, self.compiled[signature], platform, self.mesh.size)
          if platform != 'gpu':  # XLA's count: loop bodies once
            if flops > 0 and self.unrolled_flops is not None:
              flops += self.unrolled_flops.missing(lowered, batch, rng)
            flops *= self.num_micro
          self.flops = flops if flops > 0 else None
      return self.compiled[signature](state, batch, rng)

  def architecture_flops(self, batch: dict, rng: jax.Array) -> float | None:
    """The architecture's FLOPs of one step per device (what perf/mfu counts: flops.architecture_config), traced
    once on the first call (a few seconds for a large model); None without an `architecture` counter."""
    if self.counted_architecture is None and self.architecture is not None:
      self.counted_architecture = self.architecture.traced_flops(batch, rng) or None
    return self.counted_architecture


class UnrolledFlops:
  """What XLA's FLOP count of a scanned model's step (model.scan_layers) leaves out. The cost analysis counts a loop
  body once, so of the blocks a tower scans it counts one. `missing` lowers (never compiles) the same step with the
  blocks unrolled, `objective` built from the config with scan_layers off, and returns the difference of the two
  lowered programs' counts per device: the left-out blocks are batch work, split over every device of the mesh."""

  def __init__(self, objective, tx: optax.GradientTransformation, mesh: Mesh, fsdp_min_size: int, mode: str = 'none',
               num_micro: int = 1, ema_decay: float = 0.0):
    self.objective, self.tx, self.mesh, self.min_size = objective, tx, mesh, fsdp_min_size
    self.mode, self.num_micro, self.ema_decay = mode, num_micro, ema_decay

  def _traced(self, batch: dict, rng: jax.Array):
    """`objective`'s step traced on `mesh` with an abstract state (nothing allocated or compiled)."""
    abstract = jax.eval_shape(lambda r: create_train_state(self.objective, self.tx, r, self.ema_decay), rng)
    shardings = parallel.tree_shardings(abstract, self.mesh, self.min_size)
    state = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    with jax.set_mesh(self.mesh):
      return jit_train_step(self.objective, self.tx, self.mesh, shardings, self.mode, self.num_micro,
                            self.ema_decay).trace(state, batch, rng)

  def lowered_cost(self, batch: dict, rng: jax.Array) -> dict[str, float]:
    """The cost analysis of `objective`'s step lowered (not compiled) on `mesh`: whole-program, not per device."""
    traced = self._traced(batch, rng)
    with jax.set_mesh(self.mesh):
      return program_cost(traced.lower())

  def traced_flops(self, batch: dict, rng: jax.Array) -> float:
    """The matmul FLOPs per device of `objective`'s step, from its jaxpr (flops.traced_flops: every loop in full),
    split evenly over the mesh's devices."""
    return traced_flops(self._traced(batch, rng)) / self.mesh.size

  def missing(self, scanned_lowered, batch: dict, rng: jax.Array) -> float:
    """The FLOPs per device that the scanned program's count leaves out."""
    left_out = self.lowered_cost(batch, rng).get('flops', 0.0) - program_cost(scanned_lowered).get('flops', 0.0)
    return max(left_out, 0.0) / self.mesh.size


def compile_train_step(objective, tx: optax.GradientTransformation, mesh: Mesh, state_shardings: Any,
                       mode: str = 'none', num_micro: int = 1, unrolled_flops: UnrolledFlops | None = None,
                       ema_decay: float = 0.0, architecture: UnrolledFlops | None = None) -> CompiledStep:
  """`jit_train_step`, compiled on its first call and run under the mesh, with its FLOPs (`CompiledStep`; a scanned
  model passes `unrolled_flops`; `architecture` counts the architecture's FLOPs for perf/mfu)."""
  return CompiledStep(jit_train_step(objective, tx, mesh, state_shardings, mode, num_micro, ema_decay), mesh,
                      num_micro if mode != 'none' else 1, unrolled_flops, architecture)
