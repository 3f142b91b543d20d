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


def load_config(checkpoint_dir: str) -> ml_collections.ConfigDict:
  """The config saved beside a checkpoint step directory (`.../checkpoints/<step>`): enough to rebuild the model."""
  with open(os.path.join(checkpoint_dir, 'config', 'metadata')) as f:
    return ml_collections.ConfigDict(json.load(f))


def load_params(checkpoint_dir: str) -> dict:
  """The model parameters of a checkpoint step directory, as host numpy arrays (for notebooks and tools)."""
  restored = ocp.StandardCheckpointer().restore(os.path.join(os.path.abspath(checkpoint_dir), 'state'))
  return jax.tree.map(np.asarray, restored['params'])
