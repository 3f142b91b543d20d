"""Reading a checkpoint step directory without a training setup: where it is, its saved config and its variables
(for evaluation, inference, weight export and frozen teachers). Writing is training/checkpoint.py's job."""
from __future__ import annotations

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from vlp_jax.errors import DataNotFoundError


def resolve_checkpoint(path: str) -> str:
  """A checkpoint step directory from a step directory, an imported checkpoint, a `checkpoints/` directory or a
  workdir (the latest step of the last two). A path without one raises errors.DataNotFoundError (exit code 2 in
  the commands; a FileNotFoundError)."""
  path = os.path.abspath(path)
  if os.path.isdir(os.path.join(path, 'state')):
    return path
  for candidate in (os.path.join(path, 'checkpoints'), path):
    steps = [int(d) for d in os.listdir(candidate) if d.isdigit()] if os.path.isdir(candidate) else []
    if steps:
      return os.path.join(candidate, str(max(steps)))
  raise DataNotFoundError(f'no checkpoint at {path}: expected a directory with state/ and config/, or a workdir '
                          'with checkpoints/<step>/')


def read_saved_config(checkpoint_dir: str) -> dict:
  """The config saved beside a checkpoint, as written (`training.checkpoint.load_config` completes it with the
  keys added since)."""
  with open(os.path.join(resolve_checkpoint(checkpoint_dir), 'config', 'metadata')) as f:
    return json.load(f)


def load_variables(checkpoint_dir: str) -> tuple[dict, dict]:
  """(params, model_state) of a checkpoint as host numpy arrays, for notebooks and tools; no training setup."""
  path = os.path.join(resolve_checkpoint(checkpoint_dir), 'state')
  checkpointer = ocp.StandardCheckpointer()
  # Onto this process's first device, whatever mesh (or process count) saved it.
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                        checkpointer.metadata(path).item_metadata)
  restored = checkpointer.restore(path, target)
  as_numpy = lambda tree: jax.tree.map(np.asarray, tree or {})  # noqa: E731
  return as_numpy(restored['params']), as_numpy(restored.get('model_state'))
