"""One train step of a run compiled for one device, for the table's memory column (`--memory`) and for the FLOPs a
compute-matched control is sized by.

The run comes from the library's one constructor (`vlp_jax.training.Experiment`), so this compiles the program the
trainer runs (its accumulation and EMA included).
"""
from __future__ import annotations

import jax

from benchmarks.common import compiled_memory
from vlp_jax import parallel
from vlp_jax.data import formats
from vlp_jax.data.loading import pipeline
from vlp_jax.training import Experiment
from vlp_jax.training.flops import program_cost


def compiled_step(config):
  """The train step of `config` compiled for one device, for a real batch of its views."""
  run = Experiment.from_config(config, parallel.make_mesh(1, jax.devices()[:1]))
  iterator = pipeline.train_iterator(formats.train_paths(config.data), run.views, pipeline.PipelineSettings(seed=0,
                                     global_batch_size=config.batch_size, process_index=0, process_count=1,
                                     teacher_path=config.data.teacher_embeddings))
  batch = pipeline.pop_status(next(iterator))[0]
  with jax.set_mesh(run.mesh):
    return jax.jit(run.train_step, donate_argnums=0).lower(
        run.state_shapes, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch),
        jax.random.key(1)).compile()


def step_memory_bytes(config) -> int:
  """Peak bytes of the compiled train step on one device, for a real batch of this config's views."""
  return compiled_memory(compiled_step(config))['peak_bytes']


def step_flops(config) -> float:
  """XLA's FLOPs of one train step of `config` on one device (what the trainer logs as perf/step_flops)."""
  return program_cost(compiled_step(config))['flops']
