#!/usr/bin/env python
"""Train-step throughput of vlp_jax against open_clip on this machine, side by side in one run.

python benchmarks/vs_open_clip.py [--rows=tiny:128,ViT-B-32:32] [--rounds=3] [--steps=3] [--precision=fp32]

Both sides train the same architecture (the vlp_jax preset's widths, layers, heads, patch, image size, context and
vocab, with its activation), with AdamW (the config's betas, eps, weight decay) and the CLIP loss, on one batch of the
same shape, in fp32 unless --precision=bf16 (vlp_jax's compute dtype; torch then runs under CPU autocast). The rounds
alternate the two sides, so that the machine's drift hits both; each round times `--steps` steps after two untimed
ones. Prints one JSON line per row: the median samples/s of each side over the rounds and their ratio (> 1: vlp_jax
is faster). Without torch or open_clip_torch it prints why and exits 0.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Only when run as a script, so that tests can import the functions beside other modules' flags."""
  flags.DEFINE_list('rows', ['tiny:128', 'ViT-B-32:32'], 'Model preset:global batch pairs.')
  flags.DEFINE_integer('rounds', 3, 'Alternating rounds (vlp_jax, then open_clip).')
  flags.DEFINE_integer('steps', 3, 'Timed steps per side and round.')
  flags.DEFINE_enum('precision', 'fp32', ['fp32', 'bf16'], 'Compute precision of both sides.')


def parse_rows(rows: list[str]) -> list[tuple[str, int]]:
  """['tiny:128'] -> [('tiny', 128)]; a bad entry raises ValueError naming it."""
  from vlp_jax import models
  out = []
  for row in rows:
    name, _, batch = row.partition(':')
    if name not in models.PRESETS or not batch.isdigit() or int(batch) < 1:
      raise ValueError(f"--rows has '{row}'; expected <preset>:<batch> with a preset of {sorted(models.PRESETS)}")
    out.append((name, int(batch)))
  return out


def open_clip_modules():
  """(open_clip.model, open_clip.loss), or None when torch or open_clip_torch is missing. open_clip's package
  __init__ needs torchvision, which our CPU installs leave out; its model and loss modules do not."""
  sys.path.insert(0, os.path.join(ROOT, 'tests'))
  import pytest
  from torch_reference import import_open_clip_module
  try:
    return import_open_clip_module('model'), import_open_clip_module('loss')
  except pytest.skip.Exception as skipped:
    print(json.dumps({'benchmark': 'vs_open_clip', 'skipped': str(skipped)}))
    return None


def open_clip_config(model: dict) -> dict:
  """The open_clip CLIP(...) keyword arguments of a vlp_jax model config (ViT presets)."""
  v, t = model['vision'], model['text']
  if v['type'] != 'vit':
    raise ValueError(f"vs_open_clip compares ViT presets; '{model['name']}' has a {v['type']} image tower")
  return dict(embed_dim=model['embed_dim'], quick_gelu=model['act'] == 'quick_gelu',
              vision_cfg=dict(layers=v['layers'], width=v['width'], head_width=v['width'] // v['heads'],
                              patch_size=v['patch_size'], image_size=v['image_size']),
              text_cfg=dict(context_length=t['context_length'], vocab_size=t['vocab_size'], width=t['width'],
                            heads=t['heads'], layers=t['layers']))


def jax_side(name: str, batch_size: int, precision: str):
  """(a function running one vlp_jax train step (blocking), the config, the parameter count)."""
  import jax
  from benchmarks.common import build_config, real_batch
  from vlp_jax import models, objectives, parallel
  from vlp_jax.training import optim
  from vlp_jax.training.state import create_train_state
  from vlp_jax.training.step import compile_train_step
  config = build_config(name, batch_size, 'clip', precision, remat=False)
  objective = objectives.build(config, models.build_model(config.model))
  tx = optim.make_optimizer(config.optim, config.total_steps)
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  state = create_train_state(objective, tx, jax.random.key(0))
  shardings = parallel.tree_shardings(state, mesh, config.mesh.fsdp_min_size)
  state = jax.device_put(state, shardings)
  step_fn = compile_train_step(objective, tx, mesh, shardings)
  batch = parallel.global_batch(real_batch(config, batch_size), mesh)
  rng = jax.random.key(1)
  count = sum(x.size for x in jax.tree.leaves(state.params))

  def step():
    nonlocal state
    state, metrics = step_fn(state, batch, rng)
    jax.block_until_ready(metrics)
  return step, config, count


def torch_side(config, batch_size: int, precision: str, modules):
  """(a function running one open_clip train step of the same architecture, optimizer and batch shape, the
  parameter count)."""
  import torch
  model_module, loss_module = modules
  torch.manual_seed(0)
  model = model_module.CLIP(**open_clip_config(config.model.to_dict()))
  model.train()
  o = config.optim
  optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=(o.b1, o.b2), eps=o.eps,
                                weight_decay=o.weight_decay)
  loss_fn = loss_module.ClipLoss()
  size, context = config.model.vision.image_size, config.model.text.context_length
  images = torch.randn(batch_size, 3, size, size)
  texts = torch.randint(1, config.model.text.vocab_size - 1, (batch_size, context))
  texts[:, -1] = config.model.text.vocab_size - 1  # the EOT token (the highest id) ends every caption

  def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=precision == 'bf16'):
      out = model(images, texts)
      image_features, text_features, logit_scale = (out['image_features'], out['text_features'],
                                                    out['logit_scale']) if isinstance(out, dict) else out[:3]
      loss = loss_fn(image_features, text_features, logit_scale)
    loss.backward()
    optimizer.step()
  return step, sum(p.numel() for p in model.parameters())


def timed_rate(step, steps: int, batch_size: int) -> float:
  for _ in range(2):
    step()
  began = time.perf_counter()
  for _ in range(steps):
    step()
  return steps * batch_size / (time.perf_counter() - began)


def main(argv):
  del argv
  rows = parse_rows(FLAGS.rows)
  modules = open_clip_modules()
  if modules is None:
    return
  import jax
  import torch
  for name, batch_size in rows:
    jax_step, config, jax_params = jax_side(name, batch_size, FLAGS.precision)
    torch_step, torch_params = torch_side(config, batch_size, FLAGS.precision, modules)
    if jax_params != torch_params:  # the two sides must train the same network
      raise RuntimeError(f'{name}: vlp_jax has {jax_params} parameters, open_clip {torch_params}')
    rates = {'vlp_jax': [], 'open_clip': []}
    for _ in range(FLAGS.rounds):
      rates['vlp_jax'].append(timed_rate(jax_step, FLAGS.steps, batch_size))
      rates['open_clip'].append(timed_rate(torch_step, FLAGS.steps, batch_size))
    median = {side: statistics.median(r) for side, r in rates.items()}
    print(json.dumps({
        'benchmark': 'vs_open_clip', 'model': name, 'batch_size': batch_size, 'precision': FLAGS.precision,
        'vlp_jax_samples_per_sec': round(median['vlp_jax'], 1),
        'open_clip_samples_per_sec': round(median['open_clip'], 1),
        'ratio': round(median['vlp_jax'] / median['open_clip'], 3), 'parameters': jax_params,
        'rounds': {side: [round(r, 1) for r in v] for side, v in rates.items()},
        'jax': jax.__version__, 'torch': torch.__version__, 'torch_threads': torch.get_num_threads(),
        'machine': platform.processor() or platform.machine(), 'cpus': os.cpu_count()}), flush=True)


if __name__ == '__main__':
  define_flags()
  app.run(main)
