"""What jax runs on, and warnings when that is not what the config or the machine suggests; and the published
figures of each accelerator (`ACCELERATORS`).

`python -m vlp_jax.main` prints `startup_lines(...)` before anything is compiled: the backend and device count, then
one line per problem, e.g. a GPU that the system shows but jax does not use (the CPU-only jax that a plain
`pip install -e .` gives; `pip install -e ".[cuda12]"` or `".[tpu]"` installs the accelerator build).

`peak_flops(device_kind)` is the peak the trainer's `perf/mfu` divides by (training/progress.py), and
`ACCELERATORS` the one table of chip figures that benchmarks/aot.py's roofline reads too.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Accelerator:
  """Published figures of one accelerator, per jax device. `bf16_flops`: peak dense bf16 FLOP/s (matrix units, no
  2:4 sparsity); `hbm_gib` / `hbm_bytes_per_sec`: its HBM and the bandwidth of it (None where nothing here needs
  them). `device_kinds`: what `jax.Device.device_kind` says for it (matched as `normalise_kind` writes them), or for
  GPUs the words every matching kind contains (tried in table order, so a variant comes before its base model)."""
  platform: str  # 'tpu' | 'gpu'
  bf16_flops: float
  device_kinds: tuple[str, ...]
  hbm_gib: float | None = None
  hbm_bytes_per_sec: float | None = None


# Peak dense bf16 FLOP/s per jax device (on the TPUs listed, one device is one chip). Sources: the Cloud TPU system
# architecture pages (TPU v4, v5e, v5p, v6e); NVIDIA's A100, H100, H200, GH200 and L4 datasheets, with their
# "with sparsity" figures halved. TPU names are the short ones of benchmarks/aot.py's --topology ('v5e:4x4').
ACCELERATORS: dict[str, Accelerator] = {
    'v4': Accelerator('tpu', 275e12, ('tpu v4',), hbm_gib=32, hbm_bytes_per_sec=1228e9),
    'v5e': Accelerator('tpu', 197e12, ('tpu v5 lite', 'tpu v5e'), hbm_gib=16, hbm_bytes_per_sec=819e9),
    'v5p': Accelerator('tpu', 459e12, ('tpu v5', 'tpu v5p'), hbm_gib=95, hbm_bytes_per_sec=2765e9),
    'v6e': Accelerator('tpu', 918e12, ('tpu v6 lite', 'tpu v6e'), hbm_gib=32, hbm_bytes_per_sec=1640e9),
    'h100-pcie': Accelerator('gpu', 756e12, ('h100 pcie',)),  # 'NVIDIA H100 PCIe'
    'h100-nvl': Accelerator('gpu', 835e12, ('h100 nvl',)),  # 'NVIDIA H100 NVL'
    'h100': Accelerator('gpu', 989e12, ('h100',)),  # SXM: 'NVIDIA H100 80GB HBM3'
    'h200-nvl': Accelerator('gpu', 835e12, ('h200 nvl',)),  # 'NVIDIA H200 NVL'
    'h200': Accelerator('gpu', 989e12, ('h200',)),  # SXM: 'NVIDIA H200'
    'gh200': Accelerator('gpu', 989e12, ('gh200',)),  # 'NVIDIA GH200 480GB': an H100 or H200 GPU
    'a100': Accelerator('gpu', 312e12, ('a100',)),  # 'NVIDIA A100-SXM4-80GB', 'NVIDIA A100 80GB PCIe', ...
    'l4': Accelerator('gpu', 121e12, ('l4',)),  # 'NVIDIA L4' (242 with sparsity)
}


def normalise_kind(device_kind: str) -> str:
  """'NVIDIA A100-SXM4-80GB' -> 'nvidia a100 sxm4 80gb': lower case, words split at anything not a letter or digit."""
  return ' '.join(re.findall(r'[a-z0-9]+', device_kind.lower()))


def accelerator_of(device_kind: str) -> Accelerator | None:
  """The `ACCELERATORS` entry of a `jax.Device.device_kind` ('TPU v5 lite', 'NVIDIA H100 80GB HBM3'); None for the
  CPU ('cpu') and any device not in the table. A TPU kind must match one of its entry's kinds exactly ('TPU v5' is
  v5p, 'TPU v5 lite' v5e); a GPU kind must contain all the words of one of its entry's kinds, the first such entry
  winning ('NVIDIA H100 PCIe' is h100-pcie, not h100)."""
  kind = normalise_kind(device_kind)
  words = set(kind.split())
  for spec in ACCELERATORS.values():
    for pattern in spec.device_kinds:
      if (kind == pattern) if spec.platform == 'tpu' else set(pattern.split()) <= words:
        return spec
  return None


def peak_flops(device_kind: str) -> float | None:
  """The device's peak dense bf16 FLOP/s (None when unknown). MFU is measured against this peak whatever the
  config's compute dtype, as maxtext and PaLM do: a float32 run's MFU is against the bf16 peak too."""
  spec = accelerator_of(device_kind)
  return spec.bf16_flops if spec else None


def peak_device_flops(device_kind: str, override_tflops: float = 0.0) -> float | None:
  """The peak FLOP/s per device that `perf/mfu` divides by: `override_tflops` * 1e12 when > 0
  (config.log.peak_device_tflops, for a device not in the table or another precision's peak), else
  `peak_flops(device_kind)`."""
  return override_tflops * 1e12 if override_tflops > 0 else peak_flops(device_kind)

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


def host_memory_bytes() -> int:
  """This machine's physical memory, in bytes."""
  return os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')


def gib(num_bytes: float) -> str:
  return f'{num_bytes / 2**30:.1f} GiB'


def memory_shortfall(needed: int, local_devices: int, platform: str, device_limit: int | None,
                     host_total: int) -> str | None:
  """Why a program that holds `needed` bytes per device cannot run here, or None when it fits. An accelerator has
  its own `device_limit` (jax's memory_stats bytes_limit); CPU devices share the host's `host_total` bytes, all
  `local_devices` of them."""
  if platform != 'cpu':
    if device_limit and needed > device_limit:
      return f'needs {gib(needed)} per device, and a {platform} device here has {gib(device_limit)}'
    return None
  total_needed = needed * local_devices
  if total_needed > host_total:
    devices = f'{local_devices} CPU device' + ('s' if local_devices > 1 else '')
    return f'needs {gib(total_needed)} of host memory ({devices}), and this machine has {gib(host_total)}'
  return None
