"""The host allocator: XLA CPU's per-step buffers are reused instead of mapped afresh every step.

XLA CPU allocates all of a step's temporaries as one block (434 MB for the tiny CLIP step at batch 128) from the
worker thread that runs the step. glibc serves a block that large in a thread's arena with a fresh mmap, whatever
M_MMAP_MAX says (a thread arena's heap cannot grow past 64 MB), and unmaps it when the step ends. So every step
page-faults its temporaries in again: 111k minor faults per tiny step, a fifth of its time on a 2-core CPU. With one
arena (the main heap), no mmap for large blocks, and no trimming of the heap's top, the block is reused and a step
faults nothing after the first (benchmarks/RESULTS_ARCHIVE.md, 2026-11-24).

The cost is that freed host memory stays with the process (its peak resident size is not given back), which a
training or evaluation process does not mind. VLP_JAX_MALLOC=default leaves glibc's defaults alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))


def retain_freed_memory() -> bool:
  """Set glibc's malloc to reuse large freed blocks (one arena, no mmap, no trim); True when set. A no-op (False) off
  Linux, without glibc (musl has no mallopt), or with VLP_JAX_MALLOC=default. It must run before the threads that
  allocate make their own arenas, so the train command (cli/train_command.py `run_command`) calls it first, before jax
  starts its CPU client; importing vlp_jax does not."""
  if sys.platform != 'linux' or os.environ.get('VLP_JAX_MALLOC', '') == 'default':
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return False
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  return all(mallopt(param, value) == 1 for param, value in SETTINGS)
