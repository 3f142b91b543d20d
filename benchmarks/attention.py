"""Self-attention alone at a ViT-B/16's shapes (docs/scaling.md, the attention routes): a correctness check and a
microbenchmark, one JSON line per row.

Check rows (`"kind": "check"`): per tower shape (the image tower's 197 rows, the causal text tower's 77) and per
variant of the fused route, the output and the gradients with respect to q, k and v against the same attention
computed by XLA in float32 from the same bf16 inputs, next to XLA's own bf16 error (`xla_max_abs_error`). cuDNN's padding-mask backward
kernels have had NaN bugs on H100/H200: a variant passes when everything is finite and its error is at most twice
XLA's bf16 error (plus 1e-2).

Timing rows (`"kind": "time"`): forward alone and forward plus backward, each variant timed in alternating rounds
(each round the median of --steps calls, the order reversed every other round), against torch's fused
`scaled_dot_product_attention` at the true length. Variants: 'xla' (the rows as they are), 'pad64' and 'pad2' (the
fused route with the rows padded to a multiple of 64 / 2, `transformer.self_attention`), 'unpadded' (the fused route
on the true length: jax refuses it in training until its cuDNN rule is fixed, so this process patches the fix in:
`cudnn_rule` and docs/scaling.md), 'torch_sdpa'. On a GPU the fused route is 'cudnn'; on the CPU (--dry_run-sized
shapes, tests) it is 'padded', the same program through XLA.

  python benchmarks/attention.py [--batch=256 --heads=12 --head_dim=64 --lengths=197,77t:8 --rounds=5 --steps=20]
"""
from __future__ import annotations

import inspect
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks.common import alternating_order, ratio_range  # noqa: E402
from vlp_jax.models import cudnn_rule  # noqa: E402
from vlp_jax.models.transformer import self_attention  # noqa: E402

_BATCH = flags.DEFINE_integer('batch', 256, 'examples per call')
_HEADS = flags.DEFINE_integer('heads', 12, 'attention heads')
_HEAD_DIM = flags.DEFINE_integer('head_dim', 64, 'channels per head')
_LENGTHS = flags.DEFINE_list('lengths', ['197', '77t:8'],
                             "row counts; a 't' marks a causal (text) tower, ':N' another head count than --heads")
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'alternating rounds')
_STEPS = flags.DEFINE_integer('steps', 20, 'timed calls per variant per round (their median is the round figure)')
_WARMUP = flags.DEFINE_integer('warmup', 3, 'untimed calls per variant after compiling')
_TORCH = flags.DEFINE_bool('torch', True, "time torch's scaled_dot_product_attention too")

_PAD_MULTIPLES = {'pad64': 64, 'pad2': 2, 'unpadded': 1}


def parse_length(text: str, heads: int) -> tuple[int, bool, int]:
  """'197' -> (197, False, heads); '77t:8' -> (77, True, 8): rows, causal, heads."""
  rows, _, own_heads = text.partition(':')
  causal = rows.endswith('t')
  return int(rows.rstrip('t')), causal, int(own_heads or heads)


def patch_in_the_cudnn_rule_fix() -> None:
  """The one-line fix of docs/scaling.md, in this process only: jax's cuDNN training rule told that no bias is given
  (none is here) instead of seeing its zero-size placeholder as one."""
  check = cudnn_rule._fused.check_is_flash_attention
  signature = inspect.signature(check)
  if 'has_bias' not in signature.parameters:  # another jax: leave its rule alone ('unpadded' may then be refused)
    print(f'the cuDNN shape check of jax {jax.__version__} takes no has_bias: not patched', file=sys.stderr)
    return

  def fixed(*args, **options):
    bound = signature.bind(*args, **options)
    bound.arguments['has_bias'] = False
    return check(*bound.args, **bound.kwargs)

  cudnn_rule._fused.check_is_flash_attention = fixed
  cudnn_rule.cudnn_trains_odd_lengths.cache_clear()


def jax_variants(route: str, causal: bool) -> dict:
  """{name: attention function of (q, k, v) [B, T, heads, d]}."""
  variants = {'xla': lambda q, k, v: self_attention(q, k, v, causal, 'xla')}
  for name, multiple in _PAD_MULTIPLES.items():
    variants[name] = lambda q, k, v, m=multiple: self_attention(q, k, v, causal, route, m)
  return variants


def check_rows(route: str, length: int, causal: bool, inputs) -> list[dict]:
  """Each fused variant's values and q/k/v gradients against XLA in float32, beside XLA's own bf16 error."""

  def values_and_grads(attend, q, k, v, cotangent):
    out, vjp = jax.vjp(attend, q, k, v)
    return (out, *vjp(cotangent))

  q, k, v, cotangent = inputs
  variants = jax_variants(route, causal)
  upcast = [x.astype(jnp.float32) for x in inputs]
  reference = [np.asarray(x) for x in jax.jit(lambda *a: values_and_grads(variants['xla'], *a))(*upcast)]

  def error(attend) -> list[float]:
    got = jax.jit(lambda *a: values_and_grads(attend, *a))(q, k, v, cotangent)
    return [float(np.max(np.abs(np.asarray(g, np.float32) - r))) for g, r in zip(got, reference)]

  xla_error = error(variants['xla'])
  rows = []
  for name in _PAD_MULTIPLES:
    row = {'kind': 'check', 'length': length, 'causal': causal, 'variant': name, 'route': route,
           'xla_max_abs_error': dict(zip(('out', 'dq', 'dk', 'dv'), xla_error))}
    try:
      mine = error(variants[name])
    except Exception as failure:  # noqa: BLE001 -- a variant the kernel refuses: say so, check the others
      rows.append({**row, 'failed': f'{type(failure).__name__}: {str(failure)[:500]}'})
      continue
    row['max_abs_error'] = dict(zip(('out', 'dq', 'dk', 'dv'), mine))
    row['finite'] = all(np.isfinite(e) for e in mine)
    row['ok'] = row['finite'] and all(e <= 2 * x + 1e-2 for e, x in zip(mine, xla_error))
    rows.append(row)
  return rows


def median_ms(call, steps: int) -> float:
  times = []
  for _ in range(steps):
    began = time.perf_counter()
    call()
    times.append(time.perf_counter() - began)
  return 1e3 * statistics.median(times)


def jax_timers(route: str, causal: bool, inputs) -> dict:
  """{(variant, 'forward' | 'forward_backward'): a call that runs to completion}; a refused variant: its error."""
  q, k, v, cotangent = inputs
  timers = {}
  for name, attend in jax_variants(route, causal).items():
    forward = jax.jit(attend)
    backward = jax.jit(lambda q, k, v, c, attend=attend: jax.vjp(attend, q, k, v)[1](c))
    for kind, fn, args in (('forward', forward, (q, k, v)), ('forward_backward', backward, (q, k, v, cotangent))):
      try:
        jax.block_until_ready(fn(*args))
        timers[name, kind] = lambda fn=fn, args=args: jax.block_until_ready(fn(*args))
      except Exception as failure:  # noqa: BLE001 -- e.g. the kernel refusing a length
        timers[name, kind] = f'{type(failure).__name__}: {str(failure)[:500]}'
  return timers


def torch_timers(causal: bool, inputs, on_gpu: bool) -> dict:
  """torch's fused attention at the true length, [B, heads, T, d], the same dtype and values."""
  import torch
  device = 'cuda' if on_gpu else 'cpu'
  dtype = torch.bfloat16 if on_gpu else torch.float32
  q, k, v, cotangent = (torch.tensor(np.asarray(x, np.float32), device=device, dtype=dtype).transpose(1, 2)
                        .contiguous() for x in inputs)
  sync = torch.cuda.synchronize if on_gpu else (lambda: None)
  sdpa = torch.nn.functional.scaled_dot_product_attention

  def forward():
    with torch.no_grad():
      sdpa(q, k, v, is_causal=causal)
    sync()

  leaves = [x.detach().requires_grad_() for x in (q, k, v)]

  def forward_backward():
    sdpa(*leaves, is_causal=causal).backward(cotangent)
    sync()

  return {('torch_sdpa', 'forward'): forward, ('torch_sdpa', 'forward_backward'): forward_backward}


def time_rows(timers: dict, length: int, causal: bool, rounds: int, steps: int, warmup: int) -> list[dict]:
  """Every runnable timer in alternating rounds; ratios against 'pad64' per round."""
  runnable = [key for key, timer in timers.items() if callable(timer)]
  for key in runnable:
    for _ in range(warmup):
      timers[key]()
  per_round = {key: [] for key in runnable}
  for index in range(rounds):
    for key in alternating_order(runnable, index):
      per_round[key].append(median_ms(timers[key], steps))
  rows = []
  for (name, kind), timer in timers.items():
    row = {'kind': 'time', 'length': length, 'causal': causal, 'variant': name, 'pass': kind}
    if not callable(timer):
      rows.append({**row, 'failed': timer})
      continue
    row.update(ms=round(statistics.median(per_round[name, kind]), 4),
               round_ms=[round(t, 4) for t in per_round[name, kind]])
    if ('pad64', kind) in per_round and name != 'pad64':
      row['speedup_vs_pad64'] = ratio_range([a / b for a, b in zip(per_round['pad64', kind], per_round[name, kind])])
    rows.append(row)
  return rows


def main(argv):
  del argv
  on_gpu = jax.default_backend() == 'gpu'
  route = 'cudnn' if on_gpu else 'padded'
  as_installed = cudnn_rule.cudnn_trains_odd_lengths()
  patch_in_the_cudnn_rule_fix()
  print(json.dumps({'kind': 'setup', 'backend': jax.default_backend(), 'route': route, 'jax': jax.__version__,
                    'cudnn_trains_odd_lengths_as_installed': as_installed,
                    'cudnn_trains_odd_lengths_patched': cudnn_rule.cudnn_trains_odd_lengths(),
                    'batch': _BATCH.value, 'heads': _HEADS.value, 'head_dim': _HEAD_DIM.value}), flush=True)
  dtype = jnp.bfloat16 if on_gpu else jnp.float32
  for text in _LENGTHS.value:
    length, causal, heads = parse_length(text, _HEADS.value)
    keys = jax.random.split(jax.random.key(length), 4)
    inputs = [jax.random.normal(key, (_BATCH.value, length, heads, _HEAD_DIM.value), dtype) for key in keys]
    for row in check_rows(route, length, causal, inputs):
      print(json.dumps(row), flush=True)
    timers = jax_timers(route, causal, inputs)
    if _TORCH.value:
      timers.update(torch_timers(causal, inputs, on_gpu))
    for row in time_rows(timers, length, causal, _ROUNDS.value, _STEPS.value, _WARMUP.value):
      print(json.dumps(row), flush=True)


if __name__ == '__main__':
  app.run(main)
