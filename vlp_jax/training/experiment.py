"""`Experiment`: one run's parts built from its config, the one way the trainer, the benchmarks and the tests build a
run. `Experiment.from_config(config)` checks the config, then gives the model, the objective, the optimizer and its
learning-rate schedule, the train state (its initialiser, its abstract shapes and its shardings on the mesh), the
train step (pure, jitted or compiled on its first call), the objective's data views and the FLOP counters behind
perf/step_flops and perf/mfu. Nothing is initialised, traced or compiled until asked for.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import ml_collections
import optax
from jax.sharding import Mesh

from vlp_jax import config as config_lib
from vlp_jax import errors, models, objectives, parallel
from vlp_jax.accumulation import num_micro_batches
from vlp_jax.training import stages
from vlp_jax.training.flops import architecture_config
from vlp_jax.training.optim import learning_rate_schedule, make_optimizer
from vlp_jax.training.state import TrainState, create_train_state
from vlp_jax.training.step import CompiledStep, UnrolledFlops, compile_train_step, jit_train_step, train_step


def check_config(config: ml_collections.ConfigDict, num_devices: int) -> None:
  """ConfigError naming the first setting `config.validate` refuses for a run on `num_devices` devices. The inputs
  a run reads (its data, teacher vectors, a checkpoint to start from: MissingInputError, raised once every other
  check has passed) are left to the trainer, which looks for them all at once (loop.check_config_and_inputs): the
  step's shapes do not depend on them."""
  try:
    config_lib.validate(config, num_devices=num_devices)
  except errors.MissingInputError:
    pass


def flop_counter(config: ml_collections.ConfigDict, tx: optax.GradientTransformation, mesh: Mesh) -> UnrolledFlops:
  """What traces or lowers the step of `config`'s objective (never compiles it) to count its FLOPs on `mesh`, with
  the run's optimizer `tx`, accumulation and EMA."""
  objective = objectives.build(config, models.build_model(config.model))
  return UnrolledFlops(objective, tx, mesh, config.mesh.fsdp_min_size, config.accumulation.mode,
                       num_micro_batches(config), config.ema.decay)


def unrolled_flops_of(config: ml_collections.ConfigDict, tx: optax.GradientTransformation, mesh: Mesh
                      ) -> UnrolledFlops | None:
  """For a scanned model, what counts the FLOPs its layer loops hide (training/step.py): the same step with the
  blocks unrolled; None otherwise."""
  if not config.model.get('scan_layers', False):
    return None
  unrolled = ml_collections.ConfigDict(config.to_dict())
  unrolled.model.scan_layers = False
  return flop_counter(unrolled, tx, mesh)


def architecture_flops_of(config: ml_collections.ConfigDict, tx: optax.GradientTransformation, mesh: Mesh
                          ) -> UnrolledFlops:
  """What counts the architecture's FLOPs of a step, which perf/mfu divides (flops.architecture_config)."""
  return flop_counter(architecture_config(config), tx, mesh)


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity: a config is not hashable
class Experiment:
  """The parts of one run. `config` is the run's config; `stage` the config the model, the objective, the state and
  the step are built from: `config` itself, or with config.data.resolution_stages that of one stage
  (training/stages.py: the model's image size at that stage). The derived parts are built on first use."""
  config: ml_collections.ConfigDict
  stage: ml_collections.ConfigDict
  mesh: Mesh
  model: Any  # models.CLIP
  objective: Any  # objectives.Objective (or a Composite with terms)
  tx: optax.GradientTransformation
  schedule: Callable[[int], Any]  # the learning rate at an optimizer step

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict, mesh: Mesh | None = None, *, devices: list | None = None,
                  step: int = 0, validate: bool = True) -> Experiment:
    """The run of `config` on `mesh` (default: config.mesh.fsdp over `devices`, default every device; a TPU
    topology's abstract devices lower and compile without running). With config.data.resolution_stages the parts
    are those of the stage of a state after `step` updates (stages.state_config: a resumed run's). A config that
    `config.validate` refuses for the mesh's device count raises ConfigError before anything is built; validate=False
    skips that for a config already validated (a run's on a stand-in mesh) or built for one check of a test."""
    if validate:
      check_config(config, mesh.size if mesh is not None else len(jax.devices() if devices is None else devices))
    mesh = parallel.make_mesh(config.mesh.fsdp, devices) if mesh is None else mesh
    stage = stages.state_config(config, step)
    model = models.build_model(stage.model)
    objective = objectives.build(stage, model)
    tx = make_optimizer(config.optim, config.total_steps, objective.late_starts())
    return cls(config=config, stage=stage, mesh=mesh, model=model, objective=objective, tx=tx,
               schedule=learning_rate_schedule(config.optim, config.total_steps))

  # ------------------------------------------------------------------------------------------------- the data

  @functools.cached_property
  def views(self):
    """The objective's data views of the run's config: what turns a decoded record into the step's inputs."""
    return objectives.OBJECTIVES.get(self.config.objective.name).views(self.config)

  # ------------------------------------------------------------------------------------------------ the state

  def create_state(self, rng: jax.Array) -> TrainState:
    """The initial train state drawn from `rng` (with config.ema.decay, the EMA of the weights): pure, not jitted,
    for jax.jit or jax.eval_shape."""
    return create_train_state(self.objective, self.tx, rng, self.stage.ema.decay)

  def init_state(self, rng: jax.Array) -> TrainState:
    """The initial train state, initialised on the devices in its shardings (a state sharded over processes is never
    gathered)."""
    return jax.jit(self.create_state, out_shardings=self.state_shardings)(rng)

  @functools.cached_property
  def state_shapes(self) -> TrainState:
    """The train state's leaves as jax.ShapeDtypeStructs (jax.eval_shape of `create_state`: nothing allocated)."""
    return jax.eval_shape(self.create_state, jax.random.key(0))

  @functools.cached_property
  def state_shardings(self) -> Any:
    """Each leaf's NamedSharding on the mesh by the fsdp rule (parallel.tree_shardings; the EMA's leaves have the
    parameters' paths and shapes, so they get the parameters' shardings)."""
    return parallel.tree_shardings(self.state_shapes, self.mesh, self.stage.mesh.fsdp_min_size)

  @functools.cached_property
  def abstract_state(self) -> TrainState:
    """`state_shapes` with their shardings: what a checkpoint is restored into, and the step traced and lowered
    for."""
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), self.state_shapes,
                        self.state_shardings)

  @property
  def parameter_count(self) -> int:
    """Entries of the trained parameters (the EMA and the optimizer state not counted)."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(self.abstract_state.params))

  # ------------------------------------------------------------------------------------------------- the step

  @property
  def num_micro(self) -> int:
    """Micro-batches per step (config.accumulation; 1 without accumulation)."""
    return num_micro_batches(self.stage)

  def train_step(self, state: TrainState, batch: dict[str, jax.Array], rng: jax.Array
                 ) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimisation step of the run (training/step.py train_step with its accumulation and EMA): pure, not
    jitted, for a caller that jits it its own way."""
    return train_step(self.objective, self.tx, state, batch, rng, self.stage.accumulation.mode, self.num_micro,
                      self.stage.ema.decay)

  @functools.cached_property
  def jitted_step(self):
    """The step jitted with the state's shardings, the batch split over every device and the state donated
    (step.jit_train_step); trace, lower or compile it under jax.set_mesh(mesh)."""
    return jit_train_step(self.objective, self.tx, self.mesh, self.state_shardings, self.stage.accumulation.mode,
                          self.num_micro, self.stage.ema.decay)

  def traced_step(self, batch: dict, rng: jax.Array):
    """The jitted step traced for the abstract state under the mesh (nothing allocated or compiled): `.jaxpr`,
    `.lower()`. `batch` and `rng` may be arrays or jax.ShapeDtypeStructs."""
    with jax.set_mesh(self.mesh):
      return self.jitted_step.trace(self.abstract_state, batch, rng)

  def compiled_step(self) -> CompiledStep:
    """The trainer's step: compiled on its first call for that batch's shapes and run under the mesh, with its FLOPs
    per device (`flops`; a scanned model's hidden blocks added), its memory and the architecture's FLOPs that
    perf/mfu counts (`architecture_flops(batch, rng)`)."""
    return compile_train_step(self.objective, self.tx, self.mesh, self.state_shardings, self.stage.accumulation.mode,
                              self.num_micro, self.unrolled_flops, self.stage.ema.decay, self.architecture_flops)

  # ---------------------------------------------------------------------------------------------- FLOP counts

  @functools.cached_property
  def unrolled_flops(self) -> UnrolledFlops | None:
    """For a scanned model (model.scan_layers), what counts the blocks XLA's count of the layer loop leaves out;
    None otherwise."""
    return unrolled_flops_of(self.stage, self.tx, self.mesh)

  @functools.cached_property
  def architecture_flops(self) -> UnrolledFlops:
    """What counts the architecture's FLOPs of a step (`.traced_flops(batch, rng)`), which perf/mfu divides."""
    return architecture_flops_of(self.stage, self.tx, self.mesh)
