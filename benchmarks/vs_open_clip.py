#!/usr/bin/env python
"""Train-step throughput of vlp_jax against open_clip on this machine, side by side in one run.

python benchmarks/vs_open_clip.py [--rows=tiny:128,ViT-B-32:32] [--rounds=3] [--steps=3] [--precision=fp32]
                                  [--profile=N]

Both sides train the same architecture (the vlp_jax preset's widths, layers, heads, patch, image size, context and
vocab, with its activation), with AdamW (the config's betas, eps, weight decay) and the CLIP loss, on one batch of the
same shape, in fp32 unless --precision=bf16 (vlp_jax's compute dtype; torch then runs under CPU autocast). The rounds
alternate the two sides, so that the machine's drift hits both; each round times `--steps` steps after two untimed
ones. Prints one JSON line per row: the median samples/s of each side over the rounds and their ratio (> 1: vlp_jax
is faster). With --profile=N it then profiles N steps of each side and prints a table of where the step's time goes
by op kind (matmuls, attention, GELU, LayerNorm, embeddings, copies, optimizer), side by side, and each side's
costliest ops. Without torch or open_clip_torch it prints why and exits 0.
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

# The speed setting of the CPU trainer (`python -m vlp_jax.main` sets it too), before jax starts its threads;
# VLP_JAX_MALLOC=default measures without it.
from vlp_jax.cli import allocator  # noqa: E402

allocator.retain_freed_memory()

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Only when run as a script, so that tests can import the functions beside other modules' flags."""
  flags.DEFINE_list('rows', ['tiny:128', 'ViT-B-32:32'], 'Model preset:global batch pairs.')
  flags.DEFINE_integer('rounds', 3, 'Alternating rounds (vlp_jax, then open_clip).')
  flags.DEFINE_integer('steps', 3, 'Timed steps per side and round.')
  flags.DEFINE_enum('precision', 'fp32', ['fp32', 'bf16'], 'Compute precision of both sides.')
  flags.DEFINE_integer('profile', 0, 'Also profile this many steps of each side (jax.profiler, torch.profiler) and '
                       'print where the time goes, by op kind, side by side.')


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
  from support import import_open_clip_module
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

  def hlo_text() -> str:
    """The compiled step's HLO, whose instruction metadata names the model code each profiled op comes from."""
    from vlp_jax.training.step import jit_train_step
    with jax.set_mesh(mesh):
      return jit_train_step(objective, tx, mesh, shardings).lower(state, batch, rng).compile().as_text()
  step.hlo_text = hlo_text
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


# The op kinds both profiles are sorted into, in the order the table prints them.
KINDS = ('matmul: projections, MLP, patch embedding', 'attention: scores, mask, softmax, weighted sum, head layout',
         'GELU and MLP elementwise', 'LayerNorm', 'embeddings: gather, zero-filled scatter-add',
         'other model elementwise: residual adds, casts, bias', 'copies and transposes the compiler inserted',
         'loss, AdamW and update guard')


def jax_op_kind(op_name: str) -> str:
  """The kind of an XLA op from the model-code path in its metadata ('' for an op XLA inserted itself)."""
  if not op_name:
    return KINDS[6]
  if 'CLIP.encode' not in op_name:
    return KINDS[7]
  if '/attn/' in op_name and not ('in_proj' in op_name or 'out_proj' in op_name):
    return KINDS[1]
  if 'dot_general' in op_name or 'conv_general' in op_name:
    return KINDS[0]
  if '/mlp/' in op_name:
    return KINDS[2]
  if '/ln_' in op_name or 'layer_norm' in op_name.lower():
    return KINDS[3]
  if 'embedding' in op_name:
    return KINDS[4]
  return KINDS[5]


def torch_op_kind(name: str, in_optimizer: bool) -> str:
  """The kind of a torch op from its aten name (and whether it ran inside optimizer.step())."""
  if in_optimizer or 'cross_entropy' in name or 'nll_loss' in name or 'log_softmax' in name:
    return KINDS[7]
  if any(k in name for k in ('scaled_dot_product', 'flash_attention', '_softmax', 'bmm')):
    return KINDS[1]
  if any(k in name for k in ('aten::mm', 'aten::addmm', 'convolution', 'aten::linear', 'aten::matmul')):
    return KINDS[0]
  if 'gelu' in name:
    return KINDS[2]
  if 'layer_norm' in name:
    return KINDS[3]
  if 'embedding' in name or 'index_select' in name:
    return KINDS[4]
  if any(k in name for k in ('aten::copy_', 'aten::clone', 'contiguous', 'transpose', 'aten::t')):
    return KINDS[6]
  return KINDS[5]


def jax_op_profile(step, steps: int) -> tuple[dict, list]:
  """({kind: ms per step of thread time}, the 10 costliest ops as (ms per step, HLO op, model-code path))."""
  import collections
  import glob
  import re
  import tempfile
  import jax
  from jax.profiler import ProfileData
  origin = {m.group(1): m.group(2) for m in re.finditer(r'%?([\w.\-]+) = [^\n]*?metadata=\{op_name="([^"]*)"',
                                                       step.hlo_text())}
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    for _ in range(steps):
      step()
    jax.profiler.stop_trace()
    data = ProfileData.from_file(glob.glob(f'{trace_dir}/**/*.xplane.pb', recursive=True)[0])
  by_op = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      for event in line.events:
        op = dict(event.stats).get('hlo_op')
        if op:
          by_op[op] += event.duration_ns / 1e6 / steps
  kinds = collections.Counter()
  for op, ms in by_op.items():
    kinds[jax_op_kind(origin.get(op, ''))] += ms
  return dict(kinds), [(round(ms, 2), op, origin.get(op, '')) for op, ms in by_op.most_common(10)]


def torch_op_profile(step, steps: int) -> tuple[dict, list]:
  """({kind: ms per step of self time on the calling thread}, the 10 costliest aten ops as (ms per step, op,
  input shapes)). Torch runs one op at a time, each spread over its intra-op threads, so self times sum to the
  step's wall time."""
  import collections
  import torch
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(steps):
      step()
  kinds, by_op = collections.Counter(), collections.Counter()
  for event in prof.events():
    parent, in_optimizer = event.cpu_parent, False
    while parent is not None:
      in_optimizer |= parent.name.startswith('Optimizer.step')
      parent = parent.cpu_parent
    ms = event.self_cpu_time_total / 1e3 / steps
    kinds[torch_op_kind(event.name, in_optimizer)] += ms
    if event.name.startswith('aten::'):
      by_op[(event.name, str(event.input_shapes))] += ms
  return dict(kinds), [(round(ms, 2), name, shapes) for (name, shapes), ms in by_op.most_common(10)]


def profile_table(jax_kinds: dict, torch_kinds: dict, jax_step_ms: float, torch_step_ms: float) -> str:
  """Markdown: each op kind's time per step on both sides, as profiled and scaled by its share to the step's
  unprofiled wall time. The scaling makes the sides comparable: vlp_jax's profile is thread time (its two worker
  threads run ops side by side), torch's is self time on the calling thread with the profiler's per-op overhead."""
  jax_total, torch_total = sum(jax_kinds.values()), sum(torch_kinds.values())
  lines = ['| op kind | vlp_jax profiled ms/step (share) | vlp_jax wall ms | open_clip profiled ms/step (share) | '
           'open_clip wall ms |', '|---|---|---|---|---|']
  for kind in KINDS:
    j, t = jax_kinds.get(kind, 0.0), torch_kinds.get(kind, 0.0)
    lines.append(f'| {kind} | {j:.1f} ({j / jax_total:.0%}) | {j / jax_total * jax_step_ms:.1f} | '
                 f'{t:.1f} ({t / torch_total:.0%}) | {t / torch_total * torch_step_ms:.1f} |')
  lines.append(f'| **step** | {jax_total:.1f} | {jax_step_ms:.1f} | {torch_total:.1f} | {torch_step_ms:.1f} |')
  return '\n'.join(lines)


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
    if FLAGS.profile:
      jax_kinds, jax_top = jax_op_profile(jax_step, FLAGS.profile)
      torch_kinds, torch_top = torch_op_profile(torch_step, FLAGS.profile)
      print(f'\n{name}, batch {batch_size}, {FLAGS.profile} profiled steps per side:\n')
      print(profile_table(jax_kinds, torch_kinds, 1e3 * batch_size / median['vlp_jax'],
                          1e3 * batch_size / median['open_clip']))
      print('\nvlp_jax costliest ops (thread ms/step, HLO op, model code):')
      for row in jax_top:
        print('  ', *row)
      print('open_clip costliest ops (ms/step, aten op, input shapes):')
      for row in torch_top:
        print('  ', *row)
      print(flush=True)


if __name__ == '__main__':
  define_flags()
  app.run(main)
