"""One train step of a run compiled for one device, for the table's memory column (`--memory`) and for the FLOPs a
compute-matched control is sized by.

SEAM: `compiled_step` builds the model, objective, optimizer and state by hand. It is the lab's only copy of that
construction and is to become a call of the library's public run constructor (issue 62 item 1); nothing else here
builds a run.
"""
from __future__ import annotations

import jax

from benchmarks.common import compiled_memory
from vlp_jax import models, objectives, parallel
from vlp_jax.data import formats
from vlp_jax.data.loading import pipeline
from vlp_jax.training import optim
from vlp_jax.training.flops import program_cost
from vlp_jax.training.state import create_train_state
from vlp_jax.training.step import train_step


def compiled_step(config):
  """The train step of `config` compiled for one device, for a real batch of its views."""
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  tx = optim.make_optimizer(config.optim, config.total_steps, objective.late_starts())
  views = objectives.OBJECTIVES.get(config.objective.name).views(config)
  iterator = pipeline.train_iterator(formats.train_paths(config.data), views, pipeline.PipelineSettings(seed=0,
                                     global_batch_size=config.batch_size, process_index=0, process_count=1,
                                     teacher_path=config.data.teacher_embeddings))
  batch = pipeline.pop_status(next(iterator))[0]
  state = jax.eval_shape(lambda r: create_train_state(objective, tx, r), jax.random.key(0))
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  with jax.set_mesh(mesh):
    return jax.jit(lambda s, b, r: train_step(objective, tx, s, b, r), donate_argnums=0).lower(
        state, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch), jax.random.key(1)).compile()


def step_memory_bytes(config) -> int:
  """Peak bytes of the compiled train step on one device, for a real batch of this config's views."""
  return compiled_memory(compiled_step(config))['peak_bytes']


def step_flops(config) -> float:
  """XLA's FLOPs of one train step of `config` on one device (what the trainer logs as perf/step_flops)."""
  return program_cost(compiled_step(config))['flops']
