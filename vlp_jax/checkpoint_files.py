"""Reading a checkpoint step directory without a training setup: where it is, its saved config and its variables
(for evaluation, inference, weight export and frozen teachers). Writing is training/checkpoint.py's job."""
from __future__ import annotations

import json
import logging
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from vlp_jax import paths
from vlp_jax.errors import ConfigError, DataNotFoundError


class MissingItemMetadataFilter(logging.Filter):
  """Drops orbax's "Metadata file does not exist" warning, which every load of a checkpoint's `state/` item gives:
  training saves the items together, so their metadata lies one level up, and the load does not need it. Only that
  message from orbax's own files is dropped; every other orbax warning still shows."""

  def filter(self, record: logging.LogRecord) -> bool:
    from_orbax = f'{os.sep}orbax{os.sep}' in record.pathname
    return not (from_orbax and record.getMessage().startswith('Metadata file does not exist'))


# orbax logs through absl, whose records all go to the 'absl' logger.
logging.getLogger('absl').addFilter(MissingItemMetadataFilter())


def resolve_checkpoint(path: str) -> str:
  """A checkpoint step directory from a step directory, an imported checkpoint, a `checkpoints/` directory or a
  workdir (the latest step of the last two). A path without one raises errors.DataNotFoundError (exit code 2 in
  the commands; a FileNotFoundError). Local or on an object store (`gs://`, `s3://`)."""
  if problem := paths.checkpoint_location_problem(path):
    raise ConfigError(f'no checkpoint can be read from {path}: {problem}')
  path = paths.absolute(path)
  if paths.isdir(paths.join(path, 'state')):
    return path
  for candidate in (paths.join(path, 'checkpoints'), path):
    steps = [int(d) for d in paths.listdir(candidate) if d.isdigit()] if paths.isdir(candidate) else []
    if steps:
      return paths.join(candidate, str(max(steps)))
  raise DataNotFoundError(f'no checkpoint at {path}: expected a directory with state/ and config/, or a workdir '
                          'with checkpoints/<step>/')


def read_saved_config(checkpoint_dir: str) -> dict:
  """The config saved beside a checkpoint, as written (`training.checkpoint.load_config` completes it with the
  keys added since)."""
  return json.loads(paths.read_text(paths.join(resolve_checkpoint(checkpoint_dir), 'config', 'metadata')))


def _saved_state(checkpoint_dir: str) -> tuple[str, ocp.StandardCheckpointer, dict]:
  """(the state directory of a checkpoint, a checkpointer, the saved state's tree metadata by top-level key)."""
  path = paths.join(resolve_checkpoint(checkpoint_dir), 'state')
  checkpointer = ocp.StandardCheckpointer()
  return path, checkpointer, checkpointer.metadata(path).item_metadata


def has_ema(checkpoint_dir: str) -> bool:
  """Whether a checkpoint holds an EMA of the weights (trained with config.ema.decay > 0); reads metadata only."""
  return 'ema' in _saved_state(checkpoint_dir)[2]


def load_variables(checkpoint_dir: str, ema: bool = False) -> tuple[dict, dict]:
  """(params, model_state) of a checkpoint as host numpy arrays, for notebooks and tools; no training setup. With
  `ema`, the EMA of the parameters (training/ema.py: the params' tree and layout) in place of the parameters; a
  checkpoint without one raises ConfigError."""
  path, checkpointer, metadata = _saved_state(checkpoint_dir)
  if ema and 'ema' not in metadata:
    raise ConfigError(f'{paths.parent(path)} holds no EMA of the weights: only a run trained with '
                      'config.ema.decay > 0 has one; load its parameters instead (without ema / --ema)')
  # Onto this process's first device, whatever mesh (or process count) saved it.
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
  restored = checkpointer.restore(path, target)
  as_numpy = lambda tree: jax.tree.map(np.asarray, tree or {})  # noqa: E731
  return as_numpy(restored['ema' if ema else 'params']), as_numpy(restored.get('model_state'))
