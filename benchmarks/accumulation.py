#!/usr/bin/env python
"""Memory of the train step with and without decoupled gradient accumulation, from XLA's compiled memory analysis.

python benchmarks/accumulation.py [--config=configs/clip_shapes.py] [--micro_batch=256]
                                  [--batches=512,1024,2048,4096] [--loss_batch=4096]

Part 1, one device: for each effective batch, the peak bytes of the compiled step with accumulation 'none' and
'decoupled' (micro-batches of --micro_batch rows). One JSON line per row: mode, effective_batch, micro_batch,
peak_bytes, then a summary line with the growth of each mode over the range (the target: decoupled <= 1.25x while
'none' grows about linearly).
Part 2, 8 devices: the contrastive loss of a --loss_batch global batch, row-sharded; the shape of the logit matrix
each device holds (B_local x B_global) and the loss's per-device temporary bytes, against one full B x B matrix.
Nothing is executed: only compiled.
"""
from __future__ import annotations

import json
import os
import re
import sys

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8').strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks.common import compiled_memory  # noqa: E402
from vlp_jax import config as config_lib, parallel  # noqa: E402
from vlp_jax.data import formats
from vlp_jax.data.loading import pipeline  # noqa: E402
from vlp_jax.losses.contrastive import clip_infonce  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402

_CONFIG = config_lib.define_config_flag('configs/clip_shapes.py', 'Config file (model and objective).')
_MICRO = flags.DEFINE_integer('micro_batch', 256, 'Rows per micro-batch for the decoupled mode.')
_BATCHES = flags.DEFINE_list('batches', ['512', '1024', '2048', '4096'], 'Effective (global) batch sizes.')
_LOSS_BATCH = flags.DEFINE_integer('loss_batch', 4096, 'Global batch of the sharded-loss part (0 skips it).')


def one_device_run(config, batch_size: int, mode: str, micro_batch: int) -> Experiment:
  """The run of `config` on one device at global batch `batch_size`, accumulating gradients as `mode` says over
  micro-batches of `micro_batch` rows ('decoupled')."""
  config = config.copy_and_resolve_references()
  config.batch_size = batch_size
  config.accumulation.mode = mode
  if mode != 'none':
    config.accumulation.micro_batch_size = micro_batch
  return Experiment.from_config(config, parallel.make_mesh(1, jax.devices()[:1]))


def example_shapes(run: Experiment) -> dict[str, jax.ShapeDtypeStruct]:
  """Per-example shapes of the run's training inputs, read from one real batch of its views."""
  config = run.config
  iterator = pipeline.train_iterator(formats.train_paths(config.data), run.views, pipeline.PipelineSettings(seed=0,
                                     global_batch_size=8, process_index=0, process_count=1,
                                     teacher_path=config.data.teacher_embeddings))
  batch, _ = pipeline.pop_status(next(iterator))
  return {k: jax.ShapeDtypeStruct(np.shape(v)[1:], np.asarray(v).dtype) for k, v in batch.items()}


def step_memory(run: Experiment, shapes) -> dict[str, int]:
  """Memory of the run's train step compiled for its one device (state donated), for a batch of its global size."""
  batch = {k: jax.ShapeDtypeStruct((run.config.batch_size, *s.shape), s.dtype) for k, s in shapes.items()}
  with jax.set_mesh(run.mesh):
    compiled = jax.jit(run.train_step, donate_argnums=0).lower(run.state_shapes, batch, jax.random.key(1)).compile()
  return compiled_memory(compiled)


def sharded_loss_memory(batch_size: int, dim: int) -> dict:
  """The CLIP loss and its gradient on `batch_size` rows over all devices: per-device logit shapes and bytes."""
  mesh = parallel.make_mesh()
  spec = jax.ShapeDtypeStruct((batch_size, dim), jnp.float32, sharding=parallel.batch_sharding(mesh))
  loss = lambda zi, zt, s: clip_infonce(zi, zt, s)[0]  # noqa: E731
  with jax.set_mesh(mesh):
    compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))).lower(
        spec, spec, jax.ShapeDtypeStruct((), jnp.float32)).compile()
  sizes = {batch_size, batch_size // mesh.size}  # the batch-by-batch matrices of the per-device program
  shapes = sorted({(int(a), int(b)) for a, b in re.findall(r'f32\[(\d+),(\d+)\]', compiled.as_text())
                   if {int(a), int(b)} <= sizes})
  return {'section': 'sharded_loss', 'devices': mesh.size, 'global_batch': batch_size,
          'logit_shapes_per_device': [list(s) for s in shapes],
          'holds_a_full_matrix': (batch_size, batch_size) in shapes,
          'loss_temp_bytes_per_device': compiled_memory(compiled)['temp_bytes'],
          'full_logit_matrix_bytes': batch_size * batch_size * 4}


def main(argv):
  del argv
  config = _CONFIG.value
  micro = _MICRO.value
  shapes = example_shapes(one_device_run(config, config.batch_size, 'none', micro))
  peaks = {}
  for batch_size in map(int, _BATCHES.value):
    for mode in ('none', 'decoupled'):
      memory = step_memory(one_device_run(config, batch_size, mode, micro), shapes)
      peaks.setdefault(mode, []).append(memory['peak_bytes'])
      print(json.dumps({'mode': mode, 'effective_batch': batch_size, 'micro_batch': batch_size if mode == 'none'
                        else micro, **memory, 'model': config.model.name,
                        'objective': config.objective.name}), flush=True)
  first, last = int(_BATCHES.value[0]), int(_BATCHES.value[-1])
  print(json.dumps({'section': 'growth', 'batch_range': f'{first}->{last} ({last / first:g}x)',
                    **{f'{mode}_growth': round(p[-1] / p[0], 3) for mode, p in peaks.items()},
                    'decoupled_target_met': peaks['decoupled'][-1] / peaks['decoupled'][0] <= 1.25}), flush=True)
  if _LOSS_BATCH.value:
    print(json.dumps(sharded_loss_memory(_LOSS_BATCH.value, config.model.embed_dim)), flush=True)


if __name__ == '__main__':
  app.run(main)
