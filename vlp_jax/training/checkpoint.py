"""Orbax checkpoints under `workdir/checkpoints/<step>/`: the train state, the grain iterator state and the config,
saved together and atomically (orbax writes to a temporary directory and renames it when complete)."""
from __future__ import annotations

import json
import os
from typing import Any

import grain
import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp


class Checkpointer:

  def __init__(self, workdir: str, keep: int = 3):
    self.directory = os.path.join(os.path.abspath(workdir), 'checkpoints')
    self.manager = ocp.CheckpointManager(
        self.directory,
        item_names=('state', 'data', 'config'),
        item_handlers={'state': ocp.StandardCheckpointHandler(), 'data': grain.checkpoint.CheckpointHandler(),
                       'config': ocp.JsonCheckpointHandler()},
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, data_iterator: grain.DatasetIterator,
           config: ml_collections.ConfigDict) -> None:
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=grain.checkpoint.CheckpointSave(data_iterator),
        config=ocp.args.JsonSave(config.to_dict())), force=True)
    self.manager.wait_until_finished()

  def restore(self, step: int, abstract_state: Any, data_iterator: grain.DatasetIterator) -> Any:
    """The state with the shardings of `abstract_state` (ShapeDtypeStructs); the iterator is restored in place."""
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        data=grain.checkpoint.CheckpointRestore(data_iterator)))
    return restored['state']

  def close(self) -> None:
    self.manager.close()


def resolve_checkpoint(path: str) -> str:
  """A checkpoint step directory from a step directory, an imported checkpoint, a `checkpoints/` directory or a
  workdir (the latest step of the last two)."""
  path = os.path.abspath(path)
  if os.path.isdir(os.path.join(path, 'state')):
    return path
  for candidate in (os.path.join(path, 'checkpoints'), path):
    steps = [int(d) for d in os.listdir(candidate) if d.isdigit()] if os.path.isdir(candidate) else []
    if steps:
      return os.path.join(candidate, str(max(steps)))
  raise FileNotFoundError(f'no checkpoint at {path}: expected a directory with state/ and config/, or a workdir '
                          'with checkpoints/<step>/')


def load_config(checkpoint_dir: str) -> ml_collections.ConfigDict:
  """The config saved beside a checkpoint (see `resolve_checkpoint`): enough to rebuild the model."""
  with open(os.path.join(resolve_checkpoint(checkpoint_dir), 'config', 'metadata')) as f:
    return ml_collections.ConfigDict(json.load(f))


def load_variables(checkpoint_dir: str) -> tuple[dict, dict]:
  """(params, model_state) of a checkpoint as host numpy arrays, for notebooks and tools; no training setup."""
  path = os.path.join(resolve_checkpoint(checkpoint_dir), 'state')
  restored = ocp.StandardCheckpointer().restore(path)
  as_numpy = lambda tree: jax.tree.map(np.asarray, tree or {})  # noqa: E731
  return as_numpy(restored['params']), as_numpy(restored.get('model_state'))


def load_params(checkpoint_dir: str) -> dict:
  """The model parameters of a checkpoint as host numpy arrays."""
  return load_variables(checkpoint_dir)[0]


def load_pretrained(checkpoint_dir: str, params: dict, model_state: dict, model_config: ml_collections.ConfigDict
                    ) -> tuple[dict, dict, list[str]]:
  """Replace the towers' variables in (params, model_state) by a checkpoint's (continue pre-training).

  Variables the checkpoint lacks (heads an objective adds) keep their fresh values and are returned by name.
  Raises ValueError naming every shape mismatch and unexpected variable, or an activation mismatch (loading OpenAI
  weights into a GELU model gives silently wrong results otherwise).
  """
  saved_config = load_config(checkpoint_dir)
  if saved_config.model.act != model_config.act:
    raise ValueError(f'config.init.checkpoint was trained with act={saved_config.model.act!r} but '
                     f'config.model.act={model_config.act!r}; set --config.model.act={saved_config.model.act}')
  saved_params, saved_state = load_variables(checkpoint_dir)
  problems, fresh = [], []

  def merge(current: dict, saved: dict, prefix: str) -> dict:
    for key in saved:
      if key not in current:
        problems.append(f'unexpected {prefix}{key}')
    out = {}
    for key, value in current.items():
      if key not in saved:
        fresh.append(f'{prefix}{key}')
        out[key] = value
      elif isinstance(value, dict):
        out[key] = merge(value, saved[key], f'{prefix}{key}/')
      elif tuple(np.shape(saved[key])) != tuple(value.shape):
        problems.append(f'{prefix}{key}: checkpoint {tuple(np.shape(saved[key]))}, model {tuple(value.shape)}')
        out[key] = value
      else:
        out[key] = np.asarray(saved[key], value.dtype)
    return out

  params = merge(params, saved_params, '')
  model_state = merge(model_state, saved_state, '')
  if problems:
    raise ValueError(f'config.init.checkpoint={checkpoint_dir} does not fit config.model ({model_config.name}): '
                     + '; '.join(problems[:40]))
  return params, model_state, fresh
