"""Weight files -> flat state dicts {name: float32 array}, without ever unpickling; and `WeightsError`, what every
interchange rule raises when a file does not fit."""
from __future__ import annotations

import os
import re

import numpy as np
from safetensors.numpy import load_file

from vlp_jax import errors

# Scalars OpenAI's checkpoints carry beside the weights, and buffers that are not parameters.
_IGNORED_KEYS = re.compile(r'^(input_resolution|context_length|vocab_size)$|(^|\.)(attn_mask|num_batches_tracked|'
                           r'position_ids)$')


class WeightsError(errors.ConfigError):
  """A bad request, or a state dict that does not fit the model (the message lists every mismatch). Exit code 2."""


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """A flat {name: float32 array} from `.safetensors`, numpy's `.npz` (big_vision's files) or a torch state-dict
  file (weights_only=True)."""
  if not os.path.exists(path):
    raise errors.DataNotFoundError(f'no weights file at {path}')
  if path.endswith('.npz'):
    tensors = _npz_arrays(path)
  elif path.endswith('.safetensors'):
    try:
      tensors = load_file(path)
    except Exception as error:  # bfloat16 files cannot be read by numpy alone
      if 'bf16' not in str(error).lower() and 'bfloat16' not in str(error).lower():
        raise WeightsError(f'{path} is not a readable .safetensors file (truncated or corrupt?): {error}') from None
      tensors = _torch_tensors(_load_safetensors_with_torch(path))
  else:
    tensors = _torch_tensors(_torch_load(path))
  return {k: np.asarray(v, np.float32) for k, v in tensors.items() if not _IGNORED_KEYS.search(k)}


def _npz_arrays(path: str) -> dict[str, np.ndarray]:
  """The arrays of an `.npz` file, never unpickled; bfloat16 arrays, which numpy saves as 2-byte voids, widened to
  float32 (a bfloat16 is the upper half of a float32)."""
  try:
    with np.load(path, allow_pickle=False) as npz:
      arrays = {name: npz[name] for name in npz.files}
  except Exception as error:  # zipfile.BadZipFile, ValueError (pickled objects), OSError
    raise WeightsError(f'{path} could not be read as an .npz file of arrays (truncated, corrupt, or holding Python '
                       f'objects?): {type(error).__name__}: {error}') from None
  for name, value in arrays.items():
    if value.dtype.kind == 'V' and value.dtype.itemsize == 2:
      arrays[name] = (value.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
  return arrays


# torch is imported where it is used, not at the top: it is an optional dependency (`.safetensors` files need none).


def _load_safetensors_with_torch(path: str) -> dict:
  from safetensors.torch import load_file as load_torch_file  # pylint: disable=g-import-not-at-top  # needs torch
  return load_torch_file(path)


def _torch_load(path: str) -> dict:
  try:
    import torch  # pylint: disable=g-import-not-at-top  # optional
  except ImportError as error:
    raise ImportError(f'reading {path} needs torch (pip install torch); or convert it to .safetensors') from error
  try:
    state = torch.load(path, map_location='cpu', weights_only=True)
  except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for bad files
    text = str(error)
    first_line = text.splitlines()[0] if text else ''
    if 'torchscript' in text.lower():
      raise WeightsError(
          f'{path} is a TorchScript archive (OpenAI\'s original .pt files are), which cannot be read without '
          'running its code. Convert it once, in an environment you trust, with: '
          "python -c \"import torch, safetensors.torch as st; m = torch.jit.load('MODEL.pt', map_location='cpu'); "
          "st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, 'MODEL.safetensors')\" "
          'and import the .safetensors file.') from error
    if 'weights only load failed' in text.lower() or 'weights_only' in text:
      raise WeightsError(
          f'{path} holds Python objects besides tensors; it was not loaded, because unpickling them would run code '
          f'from the file (torch.load with weights_only=True refused it: {first_line}). Save a plain state dict '
          'of tensors, or .safetensors, instead.') from None
    raise WeightsError(f'{path} could not be read as a torch state dict (truncated or corrupt?): '
                       f'{type(error).__name__}: {first_line}') from None
  if isinstance(state, dict) and 'state_dict' in state and isinstance(state['state_dict'], dict):
    state = state['state_dict']  # open_clip training checkpoints
  if not isinstance(state, dict):
    raise WeightsError(f'{path} does not hold a state dict (got {type(state).__name__})')
  return {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}


def _torch_tensors(state: dict) -> dict[str, np.ndarray]:
  import torch  # pylint: disable=g-import-not-at-top  # optional
  return {k: (v.float().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)) for k, v in state.items()}
