#!/usr/bin/env python
"""Train every `configs/<method>_shapes.py` under the same budget and seed, then tabulate the final eval metrics,
the step time and the compiled memory of the train step relative to CLIP, all measured in this one run.

python benchmarks/methods.py [--methods=clip,siglip,saco] [--workdir=/tmp/methods] [--steps=400]

Prints one JSON line per method, then a Markdown table. Each training run is `python -m vlp_jax.main` in a
subprocess, exactly as a user runs it; memory is XLA's compiled memory analysis of the same train step
(arguments + outputs + temporaries of one device, benchmarks/common.py), step time the mean of the logged
`perf/samples_per_sec`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

_METHODS = flags.DEFINE_list('methods', None, 'Methods to run (default: every configs/*_shapes.py).')
_WORKDIR = flags.DEFINE_string('workdir', '/tmp/vlp_methods', 'Where the runs write (reruns resume / skip).')
_STEPS = flags.DEFINE_integer('steps', None, 'Override total_steps for every method (default: the configs\').')
REPORTED = ('zeroshot_top1', 'i2t_r1', 't2i_r1', 'affinity_consistency')


def available_methods() -> list[str]:
  names = sorted(f[:-len('_shapes.py')] for f in os.listdir(os.path.join(ROOT, 'configs')) if f.endswith('_shapes.py'))
  return ['clip'] + [n for n in names if n != 'clip']


def load_config(method: str):
  from vlp_jax.config import from_file
  return from_file(os.path.join(ROOT, 'configs', f'{method}_shapes.py'))


def step_memory_bytes(config) -> int:
  """Peak bytes of the compiled train step on one device, for a real batch of this config's views."""
  import jax
  from vlp_jax import models, objectives, parallel
  from vlp_jax.data import datasets, pipeline
  from vlp_jax.training import optim
  from vlp_jax.training.state import create_train_state
  from vlp_jax.training.step import train_step
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  tx = optim.make_optimizer(config.optim, config.total_steps)
  iterator = pipeline.train_iterator(datasets.train_paths(config.data), objectives.get(config.objective.name).views(
      config), seed=0, global_batch_size=config.batch_size, process_index=0, process_count=1,
                                     teacher_path=config.data.teacher_embeddings)
  batch = pipeline.pop_status(next(iterator))[0]
  state = jax.eval_shape(lambda r: create_train_state(objective, tx, r), jax.random.key(0))
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  with jax.set_mesh(mesh):
    compiled = jax.jit(lambda s, b, r: train_step(objective, tx, s, b, r), donate_argnums=0).lower(
        state, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch), jax.random.key(1)).compile()
  from benchmarks.common import compiled_memory
  return compiled_memory(compiled)['peak_bytes']


def train(method: str, steps: int | None) -> dict:
  workdir = os.path.join(_WORKDIR.value, method)
  args = [sys.executable, '-m', 'vlp_jax.main', f'--config=configs/{method}_shapes.py', f'--workdir={workdir}',
          '--config.seed=0']
  if steps:
    args.append(f'--config.total_steps={steps}')
  began = time.time()
  result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
  if result.returncode != 0:
    raise RuntimeError(f'{method} failed:\n{result.stderr[-3000:]}')
  records = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  final = {}
  for record in records:
    final.update({k.split('/')[-1]: v for k, v in record.items() if k.startswith('eval/synthetic/')})
  rates = [r['perf/samples_per_sec'] for r in records if 'perf/samples_per_sec' in r]
  return {'method': method, **{k: final.get(k) for k in REPORTED}, 'zeroshot_chance': final.get('zeroshot_chance'),
          'samples_per_sec': sum(rates) / max(len(rates), 1), 'wall_seconds': round(time.time() - began, 1)}


def main(argv):
  del argv
  methods = _METHODS.value or available_methods()
  rows = []
  for method in methods:
    row = train(method, _STEPS.value)
    config = load_config(method)
    row['step_seconds'] = config.batch_size / row['samples_per_sec']
    row['step_memory_bytes'] = step_memory_bytes(config)
    rows.append(row)
    print(json.dumps(row), flush=True)
  base = next((r for r in rows if r['method'] == 'clip'), rows[0])
  print(f'\n| method | zero-shot top-1 | I2T R@1 | T2I R@1 | affinity consistency | step time vs {base["method"]} '
        f'| step memory vs {base["method"]} |')
  print('|---|---|---|---|---|---|---|')
  for r in rows:
    fmt = lambda v: '-' if v is None else f'{v:.3f}'  # noqa: E731
    print(f'| {r["method"]} | {fmt(r["zeroshot_top1"])} | {fmt(r["i2t_r1"])} | {fmt(r["t2i_r1"])} | '
          f'{fmt(r["affinity_consistency"])} | {r["step_seconds"] / base["step_seconds"]:.2f}x | '
          f'{r["step_memory_bytes"] / base["step_memory_bytes"]:.2f}x |')


if __name__ == '__main__':
  app.run(main)
