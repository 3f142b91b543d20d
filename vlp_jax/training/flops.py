"""FLOPs of a traced program counted from its jaxpr: its matrix products and convolutions, 2 per multiply-add.

Two counts of a train step. The architecture's FLOPs (`architecture_config`: what perf/mfu counts, PaLM's model
FLOPs) are the matmuls of the step of the same model with every row through every block, nothing recomputed and
attention over the true rows: for a transformer, 6 x (matmul parameters) per token plus 12 x layers x width x rows
per token for attention (forward 1x, backward 2x). The executed FLOPs (`device_flops`: perf/step_flops and
perf/mfu_executed) are the compiled step's own: fewer, since a pooled tower's last block computes its pooled row
only (`transformer.BlockStack.pool_last_block`; a ViT-B/16 CLIP step at batch 256 executes 29.5 of the
architecture's 31.5 TFLOP, benchmarks/mfu_table.py); more with remat's recomputation or padded attention rows that
XLA runs; and on a GPU without the attention that a fused cuDNN kernel computes (a call no jaxpr count sees).

The executed count on a GPU (device_flops below) comes from the jaxpr: there XLA's cost analysis of the compiled
step leaves out the matmuls it hands to cuBLAS and cuDNN, and jax 0.11's GPU backend gives no count for the lowered
program. The jaxpr is the same on every backend. Elementwise work (LayerNorm, GELU, softmax, the optimizer) is not
counted, as the usual MFU definition leaves it out: XLA's count of a ViT-B/16 CLIP step is 0.3% higher, of the tiny
preset's (narrow layers) 11%.
A loop body is counted once per iteration where jax knows the count (`scan`'s length) and once for a `while`; of a
`cond` the costliest branch. A rematerialised block's recomputation appears in the backward pass and is counted.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import ml_collections
from jax.extend import core as jex_core


def dot_general_flops(eqn: Any) -> float:
  """2 x (output elements) x (contracted size) of a dot_general equation."""
  lhs = eqn.invars[0].aval
  (lhs_contracting, _), _ = eqn.params['dimension_numbers']
  contracted = math.prod(lhs.shape[d] for d in lhs_contracting)
  return 2.0 * math.prod(eqn.outvars[0].aval.shape) * contracted


def conv_flops(eqn: Any) -> float:
  """2 x (output elements) x (kernel window x input features per group) of a conv_general_dilated equation."""
  rhs = eqn.invars[1].aval
  rhs_spec = eqn.params['dimension_numbers'].rhs_spec  # (output feature, input feature, spatial dims...)
  window = math.prod(rhs.shape[d] for d in rhs_spec[2:])
  return 2.0 * math.prod(eqn.outvars[0].aval.shape) * window * rhs.shape[rhs_spec[1]]


_COUNTED = {'dot_general': dot_general_flops, 'conv_general_dilated': conv_flops}


def _sub_jaxprs(value: Any) -> list:
  """The jaxprs held by one equation parameter (a jaxpr, a closed jaxpr, or a tuple of them)."""
  if isinstance(value, jex_core.ClosedJaxpr):
    return [value.jaxpr]
  if isinstance(value, jex_core.Jaxpr):
    return [value]
  if isinstance(value, (tuple, list)):
    return [j for item in value for j in _sub_jaxprs(item)]
  return []


def jaxpr_flops(jaxpr: Any, branch=max) -> float:
  """Matmul and convolution FLOPs of a jaxpr (or closed jaxpr), nested calls and loops included. Of a `cond`, one
  branch runs: `branch` (max: the costliest; min: the cheapest, e.g. a step before a phase that starts late)."""
  if isinstance(jaxpr, jex_core.ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  total = 0.0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name in _COUNTED:
      total += _COUNTED[name](eqn)
      continue
    if name == 'cond':  # one branch runs
      total += branch([jaxpr_flops(b, branch) for b in _sub_jaxprs(eqn.params['branches'])] or [0.0])
      continue
    inner = sum(jaxpr_flops(j, branch) for value in eqn.params.values() for j in _sub_jaxprs(value))
    total += inner * (eqn.params['length'] if name == 'scan' else 1)
  return total


def traced_flops(traced: Any) -> float:
  """FLOPs of a `jax.jit(f).trace(...)` result: the whole program, before it is split over devices."""
  return jaxpr_flops(traced.jaxpr)


def function_flops(fn, *args) -> float:
  """FLOPs of `fn(*args)` (arrays or jax.ShapeDtypeStruct), traced, never run."""
  return jaxpr_flops(jax.make_jaxpr(fn)(*args))


def program_cost(compiled) -> dict[str, float]:
  """XLA's cost analysis of a compiled program on one device ('flops', 'bytes accessed', ...; {} if it has none)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):  # older jax: one dict per program
    analysis = analysis[0] if analysis else None
  return {key: float(value) for key, value in (analysis or {}).items() if isinstance(value, (int, float))}


def device_flops(traced, compiled, platform: str, num_devices: int) -> float:
  """One device's FLOPs of a program (0.0 where there is no count).

  On a GPU, the matmuls and convolutions of the traced program (`flops.traced_flops`), split evenly over the devices:
  XLA's cost analysis of the compiled program leaves out what it hands to cuBLAS and cuDNN (library calls with no
  FLOPs in its analysis: a ViT-B/16 step's count came out 250 times too low on an H200), and jax 0.11's GPU backend
  has none for the lowered program. Loops are counted in full. Elsewhere, XLA's count of the compiled program per
  device as partitioned, which counts a loop body once (see training/step.py's `CompiledStep`).
  """
  if platform == 'gpu':
    return traced_flops(traced) / num_devices
  return program_cost(compiled).get('flops', 0.0)


def program_memory(compiled) -> int | None:
  """Bytes one device holds while a compiled program runs: its arguments, outputs and temporaries, less the outputs
  that reuse donated arguments' buffers (aliases); None where the backend gives no memory analysis."""
  analysis = compiled.memory_analysis()
  if analysis is None:
    return None
  return int(analysis.argument_size_in_bytes + analysis.output_size_in_bytes + analysis.temp_size_in_bytes
             - analysis.alias_size_in_bytes)


def architecture_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy of a training config whose step's traced matmuls (`traced_flops`) are the architecture's FLOPs: the
  last block computes every row (`model.pool_last_block` off), nothing is recomputed (`model.remat` off), attention
  runs through XLA on the true rows (`model.attention='xla'`: a fused kernel is a call whose FLOPs no jaxpr shows,
  and padded rows are not the architecture's work). The same model and batch otherwise."""
  counted = ml_collections.ConfigDict(config.to_dict())
  counted.model.update(pool_last_block=False, remat=False, attention='xla')
  return counted
