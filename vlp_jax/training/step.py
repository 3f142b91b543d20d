"""The jitted train step: features -> loss -> gradient -> AdamW -> logit-scale clamp, sharded over the mesh."""
from __future__ import annotations

from typing import Any, Callable

import jax
import optax
from jax.sharding import Mesh

from vlp_jax import parallel
from vlp_jax.training.optim import clamp_logit_scales
from vlp_jax.training.state import TrainState


def train_step(objective, tx: optax.GradientTransformation, state: TrainState, batch: dict[str, jax.Array],
               rng: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
  """One optimisation step on a global batch. Pure; the rng for this step is fold_in(rng, step)."""
  step_rng = jax.random.fold_in(rng, state.step)

  def loss_fn(params):
    features, model_state = objective.features(params, state.model_state, batch, step_rng, train=True)
    loss, metrics = objective.loss(features, params, state.step)
    return loss, (metrics, model_state)

  (loss, (metrics, model_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = clamp_logit_scales(optax.apply_updates(state.params, updates))
  model_state = objective.after_step(params, model_state, state.step)
  metrics = {'loss': loss, 'grad_norm': optax.tree.norm(grads), **metrics}
  return TrainState(step=state.step + 1, params=params, model_state=model_state, opt_state=opt_state), metrics


def compile_train_step(objective, tx: optax.GradientTransformation, mesh: Mesh, state_shardings: Any
                       ) -> Callable[[TrainState, dict, jax.Array], tuple[TrainState, dict]]:
  """jit with explicit shardings: the state as given (replicated or fsdp), the batch split over every device,
  metrics replicated. The input state is donated."""
  jitted = jax.jit(
      lambda state, batch, rng: train_step(objective, tx, state, batch, rng),
      in_shardings=(state_shardings, parallel.batch_sharding(mesh), parallel.replicated(mesh)),
      out_shardings=(state_shardings, parallel.replicated(mesh)),
      donate_argnums=0)

  def step(state, batch, rng):
    with jax.set_mesh(mesh):  # lets the losses place row-sharding constraints on logit matrices
      return jitted(state, batch, rng)
  return step
