"""Reference PyTorch modules from open_clip for parity tests, importable without torchvision.

`import open_clip` runs the package `__init__`, which imports every submodule, and `open_clip.utils` (imported by
nearly all of them) does `from torchvision.ops.misc import FrozenBatchNorm2d` at the top, only for
`freeze_batch_norm_2d`. When torchvision is missing, `import_open_clip_module` therefore:
  1. registers a bare `open_clip` package (its spec, with its search path, but `__init__` not executed), so that
     submodules import one by one with their relative imports intact;
  2. imports `open_clip.utils` alone while a placeholder `torchvision.ops.misc` (whose `FrozenBatchNorm2d` raises
     when used) sits in `sys.modules`, then removes the placeholder, so nothing else sees a fake torchvision;
  3. imports the requested submodule, which finds `open_clip.utils` already loaded.
With torchvision installed the real package is imported unchanged.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types

import pytest

_TORCHVISION_STUBS = ('torchvision', 'torchvision.ops', 'torchvision.ops.misc')


class _FrozenBatchNorm2dUnavailable:

  def __init__(self, *args, **kwargs):
    raise NotImplementedError('torchvision is not installed; open_clip.utils.freeze_batch_norm_2d is unavailable')


@contextlib.contextmanager
def _placeholder_torchvision():
  """Temporarily provides `torchvision.ops.misc.FrozenBatchNorm2d` (a placeholder) if torchvision is missing."""
  if 'torchvision' in sys.modules or importlib.util.find_spec('torchvision') is not None:
    yield
    return
  stubs = {name: types.ModuleType(name) for name in _TORCHVISION_STUBS}
  stubs['torchvision'].ops = stubs['torchvision.ops']
  stubs['torchvision.ops'].misc = stubs['torchvision.ops.misc']
  stubs['torchvision.ops.misc'].FrozenBatchNorm2d = _FrozenBatchNorm2dUnavailable
  sys.modules.update(stubs)
  try:
    yield
  finally:
    for name in _TORCHVISION_STUBS:
      sys.modules.pop(name, None)


def import_open_clip_module(name: str) -> types.ModuleType:
  """`open_clip.<name>` (e.g. 'modified_resnet', 'transformer'); skips the calling test if torch or open_clip is
  not installed, or if the module needs another missing dependency (e.g. 'transform' needs torchvision proper)."""
  pytest.importorskip('torch', reason='torch is needed for the open_clip parity tests')
  full_name = f'open_clip.{name}'
  if full_name in sys.modules:
    return sys.modules[full_name]
  spec = importlib.util.find_spec('open_clip')
  if spec is None:
    pytest.skip('open_clip_torch is not installed; needed for the open_clip parity tests')
  if 'open_clip' not in sys.modules and importlib.util.find_spec('torchvision') is None:
    # Bare package: submodules resolve from spec.submodule_search_locations; __init__ is never run.
    sys.modules['open_clip'] = importlib.util.module_from_spec(spec)
  try:
    # The placeholder is present only while open_clip.utils (which imports nothing else) loads, so that other
    # libraries' torchvision probes (e.g. transformers', via open_clip.hf_model) never see it.
    with _placeholder_torchvision():
      importlib.import_module('open_clip.utils')
    return importlib.import_module(full_name)
  except ModuleNotFoundError as e:
    pytest.skip(f'{full_name} needs a missing dependency: {e}')
