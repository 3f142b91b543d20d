"""What jax runs on, and warnings when that is not what the config or the machine suggests.

`python -m vlp_jax.main` prints `startup_lines(...)` before anything is compiled: the backend and device count, then
one line per problem, e.g. a GPU that the system shows but jax does not use (the CPU-only jax that a plain
`pip install -e .` gives; `pip install -e ".[cuda12]"` or `".[tpu]"` installs the accelerator build).
"""
from __future__ import annotations

import os
import shutil
from typing import Callable

# What to install for each accelerator (pyproject.toml extras).
INSTALL_HINTS = {'gpu': 'pip install -e ".[cuda12]"', 'tpu': 'pip install -e ".[tpu]"'}


def visible_accelerators(dev_dir: str = '/dev', which: Callable[[str], str | None] = shutil.which
                         ) -> dict[str, str]:
  """{'gpu' and/or 'tpu': the evidence} for accelerators the operating system shows, whatever jax uses.

  Cheap checks only (no subprocess, no driver call): an NVIDIA GPU by `nvidia-smi` on PATH or `{dev_dir}/nvidia0`;
  a TPU by `{dev_dir}/accel*` (TPU v2-v4 VMs) or a numbered group in `{dev_dir}/vfio/` (v5e and later).
  """
  found = {}
  if which('nvidia-smi'):
    found['gpu'] = 'nvidia-smi is on PATH'
  elif os.path.exists(os.path.join(dev_dir, 'nvidia0')):
    found['gpu'] = f'{os.path.join(dev_dir, "nvidia0")} exists'
  try:
    entries = sorted(os.listdir(dev_dir))
  except OSError:  # no /dev (some sandboxes): nothing to see
    entries = []
  accel = [e for e in entries if e.startswith('accel')]
  vfio_dir = os.path.join(dev_dir, 'vfio')
  try:
    vfio_groups = sorted(e for e in os.listdir(vfio_dir) if e.isdigit())  # 'vfio' itself is the control node
  except OSError:
    vfio_groups = []
  if accel:
    found['tpu'] = f'{os.path.join(dev_dir, accel[0])} exists'
  elif vfio_groups:
    found['tpu'] = f'{os.path.join(vfio_dir, vfio_groups[0])} exists'
  return found


def backend_warnings(backend: str, device_count: int, dtype: str, fsdp: int, visible: dict[str, str]) -> list[str]:
  """One line per mismatch between where jax runs and what the config or the machine asks for.

  backend: `jax.default_backend()` ('cpu', 'gpu', 'tpu'); device_count: `jax.device_count()`; dtype:
  config.model.dtype; fsdp: config.mesh.fsdp; visible: `visible_accelerators()`. Returns [] when all is well.
  """
  if backend != 'cpu':
    return []
  warnings = []
  if dtype == 'bfloat16':
    warnings.append("warning: config.model.dtype='bfloat16' but jax found only the CPU, where bfloat16 runs no "
                    "faster than float32 (often slower); use --config.model.dtype=float32, or install jax for your "
                    "accelerator (README, Quick start)")
  if fsdp > 1:
    warnings.append(f'warning: config.mesh.fsdp={fsdp} asks for a mesh over several devices but jax found only the '
                    f'CPU ({device_count} device{"s" if device_count != 1 else ""}); on one host use '
                    '--config.mesh.fsdp=1, or install jax for your accelerator (README, Quick start)')
  for kind, evidence in visible.items():
    warnings.append(f'warning: a {kind.upper()} is visible ({evidence}) but jax runs on the CPU: install the '
                    f'{kind.upper()} build with {INSTALL_HINTS[kind]}, and check that JAX_PLATFORMS does not say cpu')
  return warnings


def startup_lines(backend: str, device_count: int, process_count: int, dtype: str, fsdp: int,
                  visible: dict[str, str]) -> list[str]:
  """The backend line `main` prints at start, then `backend_warnings`."""
  devices = f'{device_count} device{"s" if device_count != 1 else ""}'
  processes = f' over {process_count} processes' if process_count > 1 else ''
  return [f'jax backend: {backend}, {devices}{processes}',
          *backend_warnings(backend, device_count, dtype, fsdp, visible)]
