#!/usr/bin/env python
"""Train-step throughput of vlp_jax against open_clip on this machine, each in its own process, alternating.

python benchmarks/vs_open_clip.py [--rows=tiny:128,ViT-B-32:32] [--rounds=6] [--steps=5] [--warmup=1]
                                  [--precision=fp32] [--device=auto] [--isolated=true] [--profile=N]
                                  [--torch_compile --torch_compile_mode=default,reduce-overhead]

Both sides train the same architecture (the vlp_jax preset's widths, layers, heads, patch, image size, context and
vocab, with its activation; the parameter counts must agree), with AdamW (the config's betas, eps, weight decay) and
the CLIP loss, in fp32 unless --precision=bf16 (vlp_jax's compute dtype; torch then runs under autocast, as open_clip's
--precision amp_bf16 does). Both sides run on the CPU, or both on the GPU (--device; by default the GPU where jax has
one). On a GPU open_clip runs at its best: AdamW's fused kernel (fused=True), channels-last images and patch
convolution, and with --torch_compile each mode of --torch_compile_mode ('reduce-overhead': CUDA graphs;
'max-autotune': autotuned kernels too) in a worker of its own, all timed in the same alternating rounds against one
vlp_jax worker (one row per mode).

The batch is the same on both sides: images drawn from a standard normal (float32, already normalised; NHWC for
vlp_jax, the same values as NCHW for torch) and token ids with the tokenizer's layout (start token, random ids, the
end token (the highest id) at the middle position, zero padding), both from one seed; each side reports a digest of
the arrays it trains on and the run stops if they differ. Random content is enough: neither step's speed depends on
pixel or token values, and both run the full context length. vlp_jax's trainer feeds uint8 images and normalises them
in the step; here both sides skip that.

By default (--isolated) each side runs in a worker process of its own (this script with --worker=jax|torch), set up
as its users run it: the vlp_jax worker sets the CPU trainer's malloc (`vlp_jax/cli/allocator.py`, as `python -m
vlp_jax.main` does; VLP_JAX_MALLOC=default turns it off), the open_clip worker runs with glibc's defaults
(VLP_JAX_MALLOC=default in its environment) and torch's default thread count. Each worker builds its step and runs
two untimed steps once, then waits on stdin; the parent asks one worker at a time for a turn ('time N': --warmup
untimed steps, then N timed ones, answered as one JSON line of step times), so only one side computes at a time.
Rounds alternate the order (vlp_jax, open_clip, open_clip, vlp_jax, ...), so that an even --rounds puts each side
first equally often and the machine's drift hits both. --isolated=false runs both sides in this process instead,
under the trainer's malloc, with XLA's and torch's thread pools side by side: the harness of the earlier results
(which also put vlp_jax first in every round and gave it embedded-dataset examples, open_clip random ones).

Prints one JSON line per row: each side's median samples/s over its turns and the ratio of the medians (> 1: vlp_jax
is faster); the ratio within each round (vlp_jax's turn over the adjacent open_clip turn) with its median, min and
max; the turns' rates; the 1-minute load average before and after the rounds (a busy machine makes the run
meaningless); per side the malloc setting, thread counts and versions (and open_clip's optimizer, memory format and
compile mode); and each side's matmul FLOPs per step and FLOP/s with their ratios (`flops_per_step_ratio`,
`flops_per_sec_ratio`: work per second beside `ratio`, steps per second): vlp_jax's towers run their last block on
the pooled row alone, open_clip's on every row. With --profile=N it then profiles N steps of each side (in its
worker, or in this process) and prints a table of where the step's time goes by op kind (matmuls, attention, GELU,
LayerNorm, embeddings, copies, optimizer), side by side, a second with vlp_jax's kernels filed by their own names
(a cuBLAS/CUTLASS/Triton GEMM kernel as matmul, whatever HLO op XLA fused it into), and the costliest ops and
kernels.
Without torch or open_clip_torch it prints why and exits 0.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# On a GPU both sides share the card: jax must not take 75% of its memory up front (its default), which would leave
# torch too little; it grows its pool as the step needs instead.
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

from absl import app, flags  # noqa: E402

from benchmarks.common import alternating_order  # noqa: E402

FLAGS = flags.FLAGS
SIDES = ('vlp_jax', 'open_clip')  # the names in the output; the workers are 'jax' and 'torch'


def define_flags() -> None:
  """Only when run as a script, so that tests can import the functions beside other modules' flags."""
  flags.DEFINE_list('rows', ['tiny:128', 'ViT-B-32:32'], 'Model preset:global batch pairs.')
  flags.DEFINE_string('model_config', '', "A config file whose model's shapes (embed_dim, the towers' image_size, "
                      "patch_size, width, layers, heads, context_length) replace each preset's, on both sides "
                      "('': the presets'; the GPU script's dry run uses the tests' micro shapes).")
  flags.DEFINE_integer('rounds', 6, 'Rounds; each times one turn of each side, in the order of the round (even: '
                       'vlp_jax first, odd: open_clip first).', lower_bound=1)
  flags.DEFINE_integer('steps', 5, 'Timed steps per side and round.', lower_bound=1)
  flags.DEFINE_integer('warmup', 1, 'Untimed steps at the start of each turn (after the two of the build): they '
                       "refill the caches the other side used and outlast its idle threads' spinning.", lower_bound=0)
  flags.DEFINE_enum('precision', 'fp32', ['fp32', 'bf16'], 'Compute precision of both sides.')
  flags.DEFINE_bool('torch_compile', False, "open_clip's --torchcompile: torch.compile the model (forward and "
                    'backward; the optimizer step stays eager), over its fused scaled_dot_product_attention.')
  flags.DEFINE_list('torch_compile_mode', ['default'], "torch.compile's modes, each an open_clip worker of its own "
                    "timed in the same rounds ('reduce-overhead': CUDA graphs; 'max-autotune': autotuned kernels and "
                    "CUDA graphs; 'max-autotune-no-cudagraphs'), with --torch_compile.")
  flags.DEFINE_string('torch_compile_backend', 'inductor', "torch.compile's backend ('eager': dynamo's tracing "
                      "without code generation, the dry run's quick check of the compiled path).")
  flags.DEFINE_string('attention', 'auto', "vlp_jax's config.model.attention (its attention route; 'auto': cuDNN's "
                      'fused kernel on a GPU in bf16, XLA elsewhere).')
  flags.DEFINE_enum('device', 'auto', ['auto', 'cpu', 'gpu'], "Where both sides run; auto: the GPU if jax's default "
                    'backend is one (torch then runs on cuda under autocast for bf16), else the CPU.')
  flags.DEFINE_bool('isolated', True, 'Run each side in a worker process of its own (false: both in this one).')
  flags.DEFINE_integer('profile', 0, 'Also profile this many steps of each side (jax.profiler, torch.profiler) and '
                       'print where the time goes, by op kind, side by side.')
  flags.DEFINE_enum('worker', None, ['jax', 'torch'], 'Internal: serve one side to the parent over stdin/stdout.')
  flags.DEFINE_string('spec', None, 'Internal: the JSON row spec of a worker (`row_spec`).')


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
  """(open_clip.model, open_clip.loss), or the reason they cannot be imported (torch or open_clip_torch missing).
  open_clip's package __init__ needs torchvision, which our CPU installs leave out; its model and loss modules do
  not."""
  sys.path.insert(0, os.path.join(ROOT, 'tests'))
  import pytest
  from support import import_open_clip_module
  try:
    return import_open_clip_module('model'), import_open_clip_module('loss')
  except pytest.skip.Exception as skipped:
    return str(skipped)


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


def resolve_device(device: str) -> str:
  """'cpu' or 'gpu' for --device ('auto': jax's default backend, where that is one of the two)."""
  if device != 'auto':
    return device
  import jax
  return 'gpu' if jax.default_backend() == 'gpu' else 'cpu'


def spec_config(name: str, batch_size: int, precision: str, attention: str = 'auto', model_config: str = ''):
  """The vlp_jax config of a row: the preset `name`, with the shapes of the config file `model_config` if given."""
  from benchmarks.common import build_config, with_model_shapes
  config = build_config(name, batch_size, 'clip', precision, remat=False, attention=attention)
  return with_model_shapes(config, model_config) if model_config else config


def row_spec(name: str, batch_size: int, precision: str, device: str = 'cpu', torch_compile: str = '',
             attention: str = 'auto', model_config: str = '') -> dict:
  """Everything either side needs to build its step, as JSON: the torch worker gets it without importing vlp_jax.
  device: 'cpu' or 'gpu', for both sides; torch_compile: torch.compile's backend ('' = eager PyTorch);
  model_config: a config file whose model shapes replace the preset's ('': none)."""
  config = spec_config(name, batch_size, precision, attention, model_config)
  o, m = config.optim, config.model
  return {'model': name, 'batch_size': batch_size, 'precision': precision, 'device': device,
          'torch_compile': torch_compile, 'attention': attention, 'model_config': model_config,
          'open_clip': open_clip_config(m.to_dict()),
          'optim': {'lr': o.lr, 'betas': [o.b1, o.b2], 'eps': o.eps, 'weight_decay': o.weight_decay},
          'image_size': m.vision.image_size, 'context_length': m.text.context_length, 'vocab_size': m.text.vocab_size}


def shared_batch(spec: dict, seed: int = 0) -> dict:
  """The batch both sides train on, the same arrays in every process: {'image': [B, S, S, 3] float32 (standard
  normal, as normalised pixels are), 'text': [B, L] int32 (start token, random ids, the end token at L // 2, then
  zero padding)}."""
  import numpy as np
  rng = np.random.default_rng(seed)
  size, length, vocab = spec['image_size'], spec['context_length'], spec['vocab_size']
  images = rng.standard_normal((spec['batch_size'], size, size, 3), dtype=np.float32)
  tokens = rng.integers(1, vocab - 2, (spec['batch_size'], length), dtype=np.int32)
  end = length // 2
  tokens[:, 0], tokens[:, end], tokens[:, end + 1:] = vocab - 2, vocab - 1, 0  # vocab - 1 is the EOT token
  return {'image': images, 'text': tokens}


def batch_digest(batch: dict) -> str:
  """A short hash of the batch's arrays, so that the parent can check both sides train on the same one."""
  h = hashlib.sha256()
  for key in sorted(batch):
    h.update(key.encode() + batch[key].tobytes())
  return h.hexdigest()[:16]


def jax_step_flops(spec: dict) -> float:
  """Matmul and convolution FLOPs of one vlp_jax train step (training.flops, from its jaxpr, 2 per multiply-add),
  traced on the CPU without compiling, with attention on XLA's route, whose matmuls the jaxpr shows (a fused
  kernel's do not; the work is the same): the towers' last blocks compute the pooled row alone, as the trained step
  does."""
  import jax
  import numpy as np
  from vlp_jax import parallel
  from vlp_jax.training import Experiment
  from vlp_jax.training.flops import traced_flops
  config = spec_config(spec['model'], spec['batch_size'], spec['precision'], 'xla', spec.get('model_config', ''))
  run = Experiment.from_config(config, parallel.make_mesh(1, jax.devices('cpu')[:1]))
  size, batch_size = spec['image_size'], spec['batch_size']
  batch = {'image': jax.ShapeDtypeStruct((batch_size, size, size, 3), np.float32),
           'text': jax.ShapeDtypeStruct((batch_size, spec['context_length']), np.int32)}
  return traced_flops(run.traced_step(batch, jax.random.key(1)))


def jax_side(spec: dict):
  """(a function running one vlp_jax train step (blocking) on `shared_batch`, the parameter count, the step's
  FLOPs: `jax_step_flops`)."""
  import jax
  from vlp_jax import parallel
  from vlp_jax.training import Experiment
  config = spec_config(spec['model'], spec['batch_size'], spec['precision'], spec.get('attention', 'auto'),
                       spec.get('model_config', ''))
  run = Experiment.from_config(config, parallel.make_mesh(1, jax.devices(spec.get('device', 'cpu'))[:1]))
  state = run.init_state(jax.random.key(0))
  step_fn = run.compiled_step()
  batch = parallel.global_batch(shared_batch(spec), run.mesh)
  rng = jax.random.key(1)
  count = run.parameter_count
  flops = jax_step_flops(spec)

  def step():
    nonlocal state
    state, metrics = step_fn(state, batch, rng)
    jax.block_until_ready(metrics)

  def hlo_text() -> str:
    """The compiled step's HLO, whose instruction metadata names the model code each profiled op comes from."""
    with jax.set_mesh(run.mesh):
      return run.traced_step(batch, rng).lower().compile().as_text()
  step.hlo_text = hlo_text
  return step, count, flops


def torch_settings(spec: dict) -> dict:
  """How the open_clip side runs, at its fastest where the device allows: AdamW's fused kernel (fused=True, on cuda;
  the CPU keeps torch's default foreach AdamW), channels-last images and patch convolution (cuda), and
  torch.compile's backend and mode (spec['torch_compile'], spec['torch_compile_mode']; '' = eager PyTorch)."""
  on_cuda = spec.get('device') == 'gpu'
  return {'optimizer': 'AdamW(fused=True)' if on_cuda else 'AdamW(foreach)', 'channels_last': on_cuda,
          'torch_compile': spec.get('torch_compile', ''),
          'torch_compile_mode': spec.get('torch_compile_mode', 'default') if spec.get('torch_compile') else ''}


def torch_step_flops(model, loss_fn, images, texts) -> float:
  """Matmul and convolution FLOPs of one forward and backward pass of `model` (torch's FlopCounterMode, 2 per
  multiply-add), attention through the math kernel, whose matmuls the counter sees on every device (its fused CPU
  kernel has no count): every row of every block, as open_clip computes them."""
  import torch
  from torch.nn.attention import SDPBackend, sdpa_kernel
  from torch.utils.flop_counter import FlopCounterMode
  with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
    out = model(images, texts)
    features = (out['image_features'], out['text_features'], out['logit_scale']) if isinstance(out, dict) else out[:3]
    loss_fn(*features).backward()
  model.zero_grad(set_to_none=True)
  return float(counter.get_total_flops())


def torch_side(spec: dict, modules):
  """(a function running one open_clip train step of the same architecture and optimizer on `shared_batch`, the
  parameter count, the step's FLOPs: `torch_step_flops`). On a GPU (spec['device']) the model and batch live on
  cuda and each step waits for the GPU. `torch_settings` says how it runs."""
  import torch
  model_module, loss_module = modules
  settings = torch_settings(spec)
  device = torch.device('cuda' if spec.get('device') == 'gpu' else 'cpu')
  torch.manual_seed(0)
  model = model_module.CLIP(**spec['open_clip']).to(device)
  model.train()
  o = spec['optim']
  parameters = list(model.parameters())
  loss_fn = loss_module.ClipLoss()
  batch = shared_batch(spec)
  # NCHW, as torch's patch conv takes it; channels-last (NHWC in memory) where cuDNN's convolutions prefer it
  images = torch.from_numpy(batch['image'].transpose(0, 3, 1, 2).copy()).to(device)
  if settings['channels_last']:
    model = model.to(memory_format=torch.channels_last)
    images = images.contiguous(memory_format=torch.channels_last)
  texts = torch.from_numpy(batch['text']).long().to(device)
  flops = torch_step_flops(model, loss_fn, images, texts)  # eager, before compiling: the same network's work
  if settings['torch_compile']:  # as open_clip's --torchcompile: the module, not the loss or the optimizer
    mode = settings['torch_compile_mode']
    model = torch.compile(model, backend=settings['torch_compile'], mode=None if mode == 'default' else mode)
  optimizer = torch.optim.AdamW(parameters, lr=o['lr'], betas=tuple(o['betas']), eps=o['eps'],
                                weight_decay=o['weight_decay'],
                                fused=True if settings['optimizer'] == 'AdamW(fused=True)' else None)
  precision = spec['precision']

  def step():
    optimizer.zero_grad(set_to_none=True)
    # open_clip's --precision amp_bf16: autocast, parameters and optimizer state in fp32
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == 'bf16'):
      out = model(images, texts)
      image_features, text_features, logit_scale = (out['image_features'], out['text_features'],
                                                    out['logit_scale']) if isinstance(out, dict) else out[:3]
      loss = loss_fn(image_features, text_features, logit_scale)
    loss.backward()
    optimizer.step()
    if device.type == 'cuda':  # the step's kernels run asynchronously: a step ends when they have
      torch.cuda.synchronize()
  step.optimizer, step.model, step.images = optimizer, model, images  # what a test checks the settings reached
  return step, sum(p.numel() for p in parameters), flops


def malloc_setting(retained: bool) -> str:
  return ('one arena, no mmap, no trim (vlp_jax.cli.allocator)' if retained else
          'glibc defaults' + (' (VLP_JAX_MALLOC=default)' if os.environ.get('VLP_JAX_MALLOC') == 'default' else ''))


def process_info(worker: str, retained: bool) -> dict:
  """How this process runs its side: malloc, threads (the OS threads alive after the warm-up, and the libraries'
  own counts), versions."""
  info = {'pid': os.getpid(), 'malloc': malloc_setting(retained), 'python': platform.python_version()}
  if os.path.isdir('/proc/self/task'):
    info['os_threads'] = len(os.listdir('/proc/self/task'))
  if hasattr(os, 'sched_getaffinity'):
    info['cpus_available'] = len(os.sched_getaffinity(0))
  if worker == 'jax':
    import jax
    import jaxlib
    info.update(jax=jax.__version__, jaxlib=jaxlib.__version__, xla_flags=os.environ.get('XLA_FLAGS', ''),
                device_kind=jax.devices()[0].device_kind)
  else:
    import importlib.metadata
    import torch
    info.update(torch=torch.__version__, open_clip=importlib.metadata.version('open_clip_torch'),
                torch_threads=torch.get_num_threads(), torch_interop_threads=torch.get_num_interop_threads(),
                omp_num_threads=os.environ.get('OMP_NUM_THREADS', ''),
                device_kind=torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')
  return info


def build_side(worker: str, spec: dict, retained: bool):
  """(step, ready message) of one side, after the build's two untimed steps; (None, {'skipped': why}) when
  open_clip cannot be imported."""
  if worker == 'jax':
    step, count, flops = jax_side(spec)
    settings = {}
  else:
    modules = open_clip_modules()
    if isinstance(modules, str):
      return None, {'skipped': modules}
    step, count, flops = torch_side(spec, modules)
    settings = torch_settings(spec)
  for _ in range(2):  # compile (jax) and first-touch of the buffers, outside every turn
    step()
  if worker == 'torch':  # what the optimizer really is, once its first step has set it up
    settings['optimizer_fused'] = bool(step.optimizer.defaults.get('fused'))
  return step, {'parameters': count, 'batch_digest': batch_digest(shared_batch(spec)), 'flops_per_step': flops,
                **settings, **process_info(worker, retained)}


def turn(step, warmup: int, steps: int) -> list[float]:
  """Seconds of each of `steps` steps, after `warmup` untimed ones (which refill the caches the other side used)."""
  for _ in range(warmup):
    step()
  seconds = []
  for _ in range(steps):
    began = time.perf_counter()
    step()
    seconds.append(time.perf_counter() - began)
  return seconds


def profile(worker: str, step, steps: int, on_gpu: bool) -> dict:
  """{'kinds': {kind: ms per step}, 'top': the costliest ops, 'clock': 'device' (GPU kernel time, which leaves out
  the GPU's idle gaps) or 'thread' (CPU time)}; vlp_jax's also 'kernel_kinds' and 'kernel_top', its kernels sorted
  by their own names first (`kernel_name_kind`)."""
  if worker == 'jax':
    kinds, top, (kernel_kinds, kernel_top) = jax_op_profile(step, steps, on_gpu)
    by_kernel = {'kernel_kinds': kernel_kinds, 'kernel_top': kernel_top}
  else:
    (kinds, top), by_kernel = torch_op_profile(step, steps, on_gpu), {}
  return {'kinds': kinds, 'top': top, 'clock': 'device' if on_gpu else 'thread', **by_kernel}


def serve(worker: str, spec: dict) -> None:
  """The worker process: build, say so, then answer 'time N' and 'profile N' lines until stdin closes."""
  channel = os.fdopen(os.dup(1), 'w', buffering=1)
  os.dup2(2, 1)  # whatever else writes to stdout (libraries, C code) goes to stderr, not into the replies
  retained = False
  if worker == 'jax':  # the CPU trainer's speed setting, before jax starts its CPU client's threads
    from vlp_jax.cli import allocator
    retained = allocator.retain_freed_memory()
  step, ready = build_side(worker, spec, retained)
  channel.write(json.dumps(ready) + '\n')
  if step is None:
    return
  while line := sys.stdin.readline():
    command, count = line.split()
    if command == 'time':
      reply = {'seconds': turn(step, FLAGS.warmup, int(count))}
    else:
      reply = profile(worker, step, int(count), spec.get('device') == 'gpu')
    channel.write(json.dumps(reply) + '\n')


# The op kinds both profiles are sorted into, in the order the table prints them.
KINDS = ('matmul: projections, MLP, patch embedding', 'attention: scores, mask, softmax, weighted sum, head layout',
         'GELU and MLP elementwise', 'LayerNorm', 'embeddings: gather, zero-filled scatter-add',
         'other model elementwise: residual adds, casts, bias', 'copies and transposes the compiler inserted',
         'loss, AdamW and update guard', 'CUDA graphs (XLA command buffers): their kernels not attributed')


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


def device_kernel_kind(name: str) -> str:
  """The kind of a GPU kernel from its name: torch's kernels (cuBLAS, flash attention, inductor's fused Triton
  kernels, which name the ops they fuse), and jax's where the profile names no HLO op."""
  name = name.lower()
  if any(k in name for k in ('adam', 'multi_tensor', 'foreach', 'cross_entropy', 'nll_loss', 'log_softmax')):
    return KINDS[7]
  if any(k in name for k in ('flash', 'fmha', 'sdpa', 'attention', 'softmax')):
    return KINDS[1]
  if any(k in name for k in ('gemm', 'xmma', 'cutlass', 'nvjet', 'cublas', 'convolution')):
    return KINDS[0]
  if 'gelu' in name:
    return KINDS[2]
  if 'layer_norm' in name or 'layernorm' in name:
    return KINDS[3]
  if any(k in name for k in ('embedding', 'index_select', 'indexing_backward')):
    return KINDS[4]
  if any(k in name for k in ('copy', 'transpose', 'clone', 'memcpy', 'memset', 'cat_')):
    return KINDS[6]
  return KINDS[5]


def sum_by_kind(times: list[tuple[str, str, float]], steps: int) -> tuple[dict, list]:
  """times: (op, kind, milliseconds) of every profiled event over `steps` steps -> ({kind: ms per step}, the 10
  costliest ops as (ms per step, op, kind))."""
  import collections
  kinds, by_op, kind_of = collections.Counter(), collections.Counter(), {}
  for op, kind, ms in times:
    kinds[kind] += ms / steps
    by_op[op] += ms / steps
    kind_of[op] = kind
  return dict(kinds), [(round(ms, 2), op, kind_of[op]) for op, ms in by_op.most_common(10)]


# Marks of a matrix-multiply kernel's name (cuBLAS, cuBLASLt's nvjet, CUTLASS, cuDNN's implicit-GEMM convolutions,
# XLA's Triton GEMM fusions), whatever HLO op the profile files it under: XLA fuses a GELU, a bias or a cast into a
# matmul's epilogue, and the fused op is then named after the elementwise op.
MATMUL_KERNEL_MARKS = ('gemm', 'nvjet', 'cutlass', 'cublas', 'xmma', 'matmul', 'dot_fusion', 'tensorop', 'wgmma')
# Marks of a fused attention kernel (cuDNN's and others' flash attention), which may run on CUTLASS too.
ATTENTION_KERNEL_MARKS = ('flash', 'fmha', 'sdpa', 'attention')


def kernel_name_kind(kernel: str, op_kind: str) -> str:
  """The kind of a GPU kernel by its own name first: a fused attention kernel is attention, a matmul kernel
  (MATMUL_KERNEL_MARKS) is a matmul, whatever the HLO op it runs for; any other keeps `op_kind`, its HLO op's."""
  name = kernel.lower()
  if any(mark in name for mark in ATTENTION_KERNEL_MARKS):
    return KINDS[1]
  if any(mark in name for mark in MATMUL_KERNEL_MARKS):
    return KINDS[0]
  return op_kind


def jax_op_profile(step, steps: int, on_gpu: bool = False) -> tuple[dict, list, tuple[dict, list]]:
  """({kind: ms per step}, the 10 costliest ops as (ms per step, HLO op, model-code path or kind), and the same two
  with each kernel sorted by its own name first (`kernel_name_kind`; the top as (ms per step, kernel, kind))). On a
  CPU the time is the ops' thread time (the "kernel" is the op); on a GPU the kernels' time on the device (the
  planes named /device:GPU, their stream lines), each kernel by the HLO op the profile names, else by its own
  name."""
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
  times, by_kernel = [], []
  if on_gpu:
    for plane in (p for p in data.planes if p.name.startswith('/device:GPU')):
      # the kernels as they ran on the streams; other lines (if any) summarise the same time again
      lines = [line for line in plane.lines if line.name.startswith('Stream')] or list(plane.lines)
      for line in lines:
        for event in line.events:
          op = dict(event.stats).get('hlo_op')
          if op and op.startswith('command_buffer'):  # a CUDA graph: its kernels show as the graph alone
            kind = KINDS[8]
          else:
            kind = jax_op_kind(origin.get(op, '')) if op else device_kernel_kind(event.name)
          times.append((op or event.name, kind, event.duration_ns / 1e6))
          by_kernel.append((event.name, kernel_name_kind(event.name, kind), event.duration_ns / 1e6))
  else:
    for plane in data.planes:
      for line in plane.lines:
        for event in line.events:
          op = dict(event.stats).get('hlo_op')
          if op:
            kind = jax_op_kind(origin.get(op, ''))
            times.append((op, kind, event.duration_ns / 1e6))
            by_kernel.append((event.name, kernel_name_kind(event.name, kind), event.duration_ns / 1e6))
  kinds, top = sum_by_kind(times, steps)
  return kinds, [(ms, op, origin.get(op, kind)) for ms, op, kind in top], sum_by_kind(by_kernel, steps)


def torch_op_profile(step, steps: int, on_gpu: bool = False) -> tuple[dict, list]:
  """({kind: ms per step}, the 10 costliest ops). On a CPU: self time of the aten ops on the calling thread (torch
  runs one op at a time, each spread over its intra-op threads, so self times sum to the step's wall time), the top
  as (ms per step, op, input shapes). On a GPU: the kernels' time on the device (from the profiler's trace), the top
  as (ms per step, kernel, kind)."""
  import collections
  import tempfile
  import torch
  activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
  with torch.profiler.profile(activities=activities, record_shapes=not on_gpu) as prof:
    for _ in range(steps):
      step()
  if on_gpu:
    with tempfile.TemporaryDirectory() as trace_dir:
      prof.export_chrome_trace(f'{trace_dir}/trace.json')
      with open(f'{trace_dir}/trace.json') as trace:
        events = json.load(trace)['traceEvents']
    return sum_by_kind([(e['name'], device_kernel_kind(e['name']), e['dur'] / 1e3) for e in events
                        if e.get('cat') in ('kernel', 'gpu_memcpy', 'gpu_memset')], steps)
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


def profile_table(jax_kinds: dict, torch_kinds: dict, jax_step_ms: float, torch_step_ms: float,
                  device_clock: bool = False) -> str:
  """Markdown: each op kind's time per step on both sides. On a CPU (thread time) the profiled times are scaled by
  their share to the step's unprofiled wall time, which makes the sides comparable: vlp_jax's profile is thread time
  (its worker threads run ops side by side), torch's is self time on the calling thread with the profiler's per-op
  overhead. On a GPU (device_clock) the kernels' time is already wall time on the device, so it is not scaled, and a
  last row says how long the GPU ran no kernel in the unprofiled step (launch gaps, the host's own work)."""
  jax_total, torch_total = sum(jax_kinds.values()), sum(torch_kinds.values())
  jax_scale, torch_scale = (1.0, 1.0) if device_clock else (jax_step_ms / jax_total, torch_step_ms / torch_total)
  lines = ['| op kind | vlp_jax profiled ms/step (share) | vlp_jax wall ms | open_clip profiled ms/step (share) | '
           'open_clip wall ms |', '|---|---|---|---|---|']
  for kind in KINDS:
    j, t = jax_kinds.get(kind, 0.0), torch_kinds.get(kind, 0.0)
    lines.append(f'| {kind} | {j:.1f} ({j / jax_total:.0%}) | {j * jax_scale:.1f} | '
                 f'{t:.1f} ({t / torch_total:.0%}) | {t * torch_scale:.1f} |')
  if device_clock:
    idle = (jax_step_ms - jax_total, torch_step_ms - torch_total)
    lines.append(f'| GPU idle: no kernel running | | {idle[0]:.1f} | | {idle[1]:.1f} |')
  lines.append(f'| **step** | {jax_total:.1f} | {jax_step_ms:.1f} | {torch_total:.1f} | {torch_step_ms:.1f} |')
  return '\n'.join(lines)


def kernel_name_table(by_op: dict, by_kernel: dict, torch_kinds: dict) -> str:
  """Markdown: vlp_jax's profiled time per op kind with each kernel filed by its HLO op and by its own name
  (`kernel_name_kind`: a matmul kernel counts as matmul whatever op it runs for), beside open_clip's (filed by
  kernel name on a GPU), and the difference the names make."""
  lines = ['| op kind | vlp_jax by HLO op ms/step | vlp_jax by kernel name ms/step | moved | open_clip ms/step |',
           '|---|---|---|---|---|']
  for kind in KINDS:
    op, name, t = by_op.get(kind, 0.0), by_kernel.get(kind, 0.0), torch_kinds.get(kind, 0.0)
    lines.append(f'| {kind} | {op:.1f} | {name:.1f} | {name - op:+.1f} | {t:.1f} |')
  lines.append(f'| **all kernels** | {sum(by_op.values()):.1f} | {sum(by_kernel.values()):.1f} | | '
               f'{sum(torch_kinds.values()):.1f} |')
  return '\n'.join(lines)


class LocalSide:
  """One side in this process (--isolated=false)."""

  def __init__(self, worker: str, spec: dict, retained: bool):
    self.worker, self.on_gpu = worker, spec.get('device') == 'gpu'
    self.step, self.ready = build_side(worker, spec, retained)

  def turn(self, steps: int) -> list[float]:
    return turn(self.step, FLAGS.warmup, steps)

  def profile(self, steps: int) -> dict:
    return profile(self.worker, self.step, steps, self.on_gpu)

  def close(self) -> None:
    pass


class WorkerSide:
  """One side in a worker process of its own (this script with --worker), driven over its stdin and stdout."""

  def __init__(self, worker: str, spec: dict):
    env = dict(os.environ)
    if worker == 'torch':  # torch as its users run it: glibc's malloc, not the vlp_jax trainer's
      env['VLP_JAX_MALLOC'] = 'default'
    self.worker = worker
    self.process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), f'--worker={worker}', f'--spec={json.dumps(spec)}',
         f'--warmup={FLAGS.warmup}'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    self.ready = None

  def reply(self) -> dict:
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f'the {self.worker} worker exited ({self.process.wait()}) without replying; its stderr '
                         'is above')
    return json.loads(line)

  def ask(self, command: str) -> dict:
    self.process.stdin.write(command + '\n')
    self.process.stdin.flush()
    return self.reply()

  def turn(self, steps: int) -> list[float]:
    return self.ask(f'time {steps}')['seconds']

  def profile(self, steps: int) -> dict:
    return self.ask(f'profile {steps}')

  def close(self) -> None:
    if self.ready is None or 'skipped' in self.ready:  # not (or no longer) needed: still building, or failed
      self.process.kill()
    self.process.stdin.close()  # the worker's loop ends on end of input
    self.process.wait()


def open_clip_sides(modes: list[str]) -> list[str]:
  """The open_clip sides' names, one per torch.compile mode: 'open_clip' alone, or 'open_clip:<mode>' each."""
  return ['open_clip'] if len(modes) == 1 else [f'open_clip:{mode}' for mode in modes]


def start_sides(specs: dict, retained: bool) -> dict:
  """{side name: LocalSide or WorkerSide}, built and warmed up; specs: {side name: its row spec}, vlp_jax's first.
  The workers build at the same time (nothing is timed yet); open_clip's answer first, so that a missing open_clip
  does not wait for vlp_jax's compile."""
  worker = {side: 'jax' if side == 'vlp_jax' else 'torch' for side in specs}
  if not FLAGS.isolated:
    return {side: LocalSide(worker[side], spec, retained) for side, spec in specs.items()}
  sides = {side: WorkerSide(worker[side], spec) for side, spec in specs.items()}
  try:
    for side in list(specs)[::-1]:
      sides[side].ready = sides[side].reply()
      if 'skipped' in sides[side].ready:
        break
  except BaseException:
    for side in sides.values():
      side.close()
    raise
  return sides


def round_order(index: int, names=SIDES) -> tuple[str, ...]:
  """vlp_jax first in even rounds, last in odd ones: ABBA ABBA ... (with several open_clip sides: ABC CBA ...)."""
  return tuple(alternating_order(names, index))


def time_rounds(sides: dict, rounds: int, steps: int, batch_size: int) -> dict:
  """{side: [samples/s of each round's turn]}; one side computes at a time."""
  rates = {side: [] for side in sides}
  for index in range(rounds):
    for side in round_order(index, list(sides)):
      rates[side].append(steps * batch_size / sum(sides[side].turn(steps)))
  return rates


def summary(rates: dict) -> dict:
  """The medians, their ratio and the per-round ratios (vlp_jax over the adjacent open_clip turn)."""
  median = {side: statistics.median(rates[side]) for side in SIDES}
  pairs = [j / t for j, t in zip(rates['vlp_jax'], rates['open_clip'])]
  return {'vlp_jax_samples_per_sec': round(median['vlp_jax'], 1),
          'open_clip_samples_per_sec': round(median['open_clip'], 1),
          'ratio': round(median['vlp_jax'] / median['open_clip'], 3),
          'pair_ratios': [round(p, 3) for p in pairs], 'pair_ratio_median': round(statistics.median(pairs), 3),
          'pair_ratio_min': round(min(pairs), 3), 'pair_ratio_max': round(max(pairs), 3),
          'round_rates': {side: [round(r, 1) for r in rates[side]] for side in SIDES}}


def check_same_work(name: str, ready: dict, open_clip: str = 'open_clip') -> None:
  """The two sides must train the same network on the same batch."""
  j, t = ready['vlp_jax'], ready[open_clip]
  if j['parameters'] != t['parameters']:
    raise RuntimeError(f"{name}: vlp_jax has {j['parameters']} parameters, open_clip {t['parameters']}")
  if j['batch_digest'] != t['batch_digest']:
    raise RuntimeError(f"{name}: the sides' batches differ ({j['batch_digest']} vs {t['batch_digest']})")


def work_fields(ready_jax: dict, ready_torch: dict, result: dict, batch_size: int) -> dict:
  """Each side's FLOPs per step (vlp_jax: the towers' last blocks on the pooled row alone; open_clip: on every row)
  and FLOP/s at its median rate, and the ratio of the FLOP/s (> 1: vlp_jax does more work per second), beside
  `ratio`, the ratio of samples per second."""
  fields = {}
  for side, ready in (('vlp_jax', ready_jax), ('open_clip', ready_torch)):
    fields[f'{side}_flops_per_step'] = ready['flops_per_step']
    fields[f'{side}_flops_per_sec'] = ready['flops_per_step'] * result[f'{side}_samples_per_sec'] / batch_size
  fields['flops_per_step_ratio'] = round(ready_jax['flops_per_step'] / ready_torch['flops_per_step'], 4)
  fields['flops_per_sec_ratio'] = round(fields['vlp_jax_flops_per_sec'] / fields['open_clip_flops_per_sec'], 3)
  return fields


def print_profile(name: str, batch_size: int, sides: dict, result: dict, open_clip: str = 'open_clip') -> None:
  jax_profile, torch_profile = sides['vlp_jax'].profile(FLAGS.profile), sides[open_clip].profile(FLAGS.profile)
  device_clock = jax_profile['clock'] == 'device'
  print(f"\n{name}, batch {batch_size}, {FLAGS.profile} profiled steps per side "
        f"({'GPU kernel time' if device_clock else 'CPU thread time'}):\n")
  step_ms = {side: 1e3 * batch_size / result[f'{side}_samples_per_sec'] for side in SIDES}
  print(profile_table(jax_profile['kinds'], torch_profile['kinds'], step_ms['vlp_jax'], step_ms['open_clip'],
                      device_clock))
  print('\nThe same kernels, vlp_jax\'s filed by HLO op and by kernel name (matmul kernels as matmul):\n')
  print(kernel_name_table(jax_profile['kinds'], jax_profile['kernel_kinds'], torch_profile['kinds']))
  print('\nvlp_jax costliest ops (ms/step, HLO op, model code):')
  for row in jax_profile['top']:
    print('  ', *row)
  print('vlp_jax costliest kernels (ms/step, kernel, kind by its name):')
  for row in jax_profile['kernel_top']:
    print('  ', *row)
  print('open_clip costliest ' + ('kernels (ms/step, kernel, kind):' if device_clock else
                                  'ops (ms/step, aten op, input shapes):'))
  for row in torch_profile['top']:
    print('  ', *row)
  print(flush=True)


def run_row(name: str, batch_size: int, retained: bool) -> bool:
  """Time (and profile) one row and print its JSON line, one per torch.compile mode (--torch_compile_mode: each an
  open_clip worker of its own, all timed in the same alternating rounds against one vlp_jax worker); False when
  open_clip is not there (the line says why). retained: whether this process has the trainer's malloc (in-process
  mode)."""
  spec = row_spec(name, batch_size, FLAGS.precision, resolve_device(FLAGS.device),
                  FLAGS.torch_compile_backend if FLAGS.torch_compile else '', FLAGS.attention, FLAGS.model_config)
  modes = FLAGS.torch_compile_mode if FLAGS.torch_compile else ['default']
  rivals = open_clip_sides(modes)
  specs = {'vlp_jax': spec, **{side: {**spec, 'torch_compile_mode': mode} for side, mode in zip(rivals, modes)}}
  sides = start_sides(specs, retained)
  try:
    ready = {side: sides[side].ready for side in specs}
    skipped = next((ready[side]['skipped'] for side in rivals if 'skipped' in ready[side]), None)
    if skipped:  # vlp_jax's worker was not waited for
      print(json.dumps({'benchmark': 'vs_open_clip', 'skipped': skipped}), flush=True)
      return False
    for side in rivals:
      check_same_work(name, ready, side)
    load_before = os.getloadavg()[0]
    rates = time_rounds(sides, FLAGS.rounds, FLAGS.steps, batch_size)
    # The 1-minute load around the rounds: anything else running shows here (torch's OpenMP threads slow down many
    # times over when a core is taken from them, XLA's far less), and such a run measures the load, not the sides.
    load_average = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    for side in rivals:
      result = summary({'vlp_jax': rates['vlp_jax'], 'open_clip': rates[side]})
      print(json.dumps({
          'benchmark': 'vs_open_clip', 'model': name, 'batch_size': batch_size, 'precision': FLAGS.precision,
          'device': spec['device'], 'torch_compile': spec['torch_compile'] or False,
          'torch_compile_mode': ready[side]['torch_compile_mode'], 'attention': FLAGS.attention,
          **({'model_config': FLAGS.model_config} if FLAGS.model_config else {}),
          'mode': 'isolated' if FLAGS.isolated else 'in-process', **result, 'load_average': load_average,
          **work_fields(ready['vlp_jax'], ready[side], result, batch_size),
          'rounds': FLAGS.rounds, 'steps': FLAGS.steps, 'warmup': FLAGS.warmup,
          'parameters': ready['vlp_jax']['parameters'], 'batch_digest': ready['vlp_jax']['batch_digest'],
          'sides': {out: {k: v for k, v in ready[key].items() if k not in ('parameters', 'batch_digest')}
                    for out, key in (('vlp_jax', 'vlp_jax'), ('open_clip', side))},
          'machine': platform.processor() or platform.machine(), 'cpus': os.cpu_count()}), flush=True)
    if FLAGS.profile:  # against the first mode's open_clip
      print_profile(name, batch_size, sides, summary({'vlp_jax': rates['vlp_jax'], 'open_clip': rates[rivals[0]]}),
                    rivals[0])
    return True
  finally:
    for side in sides.values():
      side.close()


def main(argv):
  del argv
  if FLAGS.worker:
    serve(FLAGS.worker, json.loads(FLAGS.spec))
    return
  retained = False
  if not FLAGS.isolated:  # the trainer's malloc for this whole process, before jax starts its threads
    from vlp_jax.cli import allocator
    retained = allocator.retain_freed_memory()
  for name, batch_size in parse_rows(FLAGS.rows):
    if not run_row(name, batch_size, retained):
      return


if __name__ == '__main__':
  define_flags()
  app.run(main)
