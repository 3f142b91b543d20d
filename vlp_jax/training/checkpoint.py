"""Orbax checkpoints under `workdir/checkpoints/<step>/`: the train state, the grain iterator state and the config,
saved together and atomically (orbax writes to a temporary directory and renames it when complete)."""
from __future__ import annotations

import json
import os
import time
import zlib
from typing import Any

import grain
import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from vlp_jax import paths
from vlp_jax.checkpoint_files import load_variables, read_saved_config
from vlp_jax.data.image.image_ops import preprocessing_of
from vlp_jax.models.resize import resize_tower, shape_changes
from vlp_jax.models.towers import vision_tower, with_tower_defaults
from vlp_jax.models.transformer import BlockStack, in_layout
from vlp_jax.config import with_current_defaults


MANIFEST = 'vlp_jax_manifest.json'


def file_digests(directory: str) -> dict[str, list[int]]:
  """{relative path: [size, crc32]} of every file under `directory` except the manifest (and its temporary)."""
  out = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      rel = os.path.relpath(path, directory)
      if rel.startswith(MANIFEST):  # the manifest and its temporary file
        continue
      crc = 0
      with open(path, 'rb') as f:
        while chunk := f.read(1 << 22):
          crc = zlib.crc32(chunk, crc)
      out[rel] = [os.path.getsize(path), crc]
  return out


class Checkpointer:
  """Saves and restores the train state, the data iterator and the config, one directory per step.

  Each saved step gets a manifest of its files (sizes and CRC32s), written last. `restore_latest` checks the
  manifest before loading, so a checkpoint torn by a crash, a full disk or a partial copy is never loaded: it is
  moved aside to `checkpoints/corrupt-<step>-<time>` (kept, not deleted) and the previous complete step is used.

  With `async_save`, `save` returns once the state is copied to host memory and the data iterator's position is
  taken; orbax writes the files in a background thread. The manifest follows once they are committed: `poll` (every
  step) writes it when the write is seen to be done, and the next `save`, `wait` and `close` wait for a write still
  running and then write it.
  """

  def __init__(self, workdir: str, keep: int = 3, async_save: bool = False):
    # A local workdir made absolute; a gs:// one kept as it is (orbax writes the arrays through tensorstore's GCS
    # driver). Other object stores are refused before this (paths.checkpoint_location_problem).
    self.directory = paths.join(paths.absolute(workdir), 'checkpoints')
    self.keep = keep
    self.async_save = async_save
    self._writing: int | None = None  # the step whose files an async save is writing
    self._open()

  @property
  def remote(self) -> bool:
    """Whether the checkpoints go to an object store (no manifests there: see `check`)."""
    return paths.is_remote(self.directory)

  def _open(self) -> None:
    self.manager = ocp.CheckpointManager(
        self.directory,
        item_names=('state', 'data', 'config'),
        item_handlers={'state': ocp.StandardCheckpointHandler(), 'data': grain.checkpoint.CheckpointHandler(),
                       'config': ocp.JsonCheckpointHandler()},
        options=ocp.CheckpointManagerOptions(max_to_keep=self.keep, create=True,
                                             enable_async_checkpointing=self.async_save))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def step_directory(self, step: int) -> str:
    return paths.join(self.directory, str(step))

  def save(self, step: int, state: Any, data_iterator: grain.DatasetIterator,
           config: ml_collections.ConfigDict) -> None:
    self._finish_write()
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=grain.checkpoint.CheckpointSave(data_iterator),
        config=ocp.args.JsonSave(config.to_dict())), force=True)
    if self.async_save:
      self._writing = step
      return
    self.manager.wait_until_finished()
    self._write_manifest(step)
    _sync('vlp_jax_checkpoint_saved')

  def poll(self) -> None:
    """Write the manifest of an async save whose files are committed; cheap, call it every step."""
    if (self._writing is not None and not self.manager.is_saving_in_progress() and not self.remote
        and os.path.isdir(self.step_directory(self._writing))):  # renamed into place: committed
      step, self._writing = self._writing, None
      self._write_manifest(step)

  def _finish_write(self) -> None:
    """Wait for an async save still writing, then write its manifest. Every process waits, whether or not its
    `poll` saw the write end, so that they all make the same calls."""
    if self.async_save:
      self.manager.wait_until_finished()
    if self._writing is not None:
      step, self._writing = self._writing, None
      self._write_manifest(step)

  def _write_manifest(self, step: int) -> None:
    if jax.process_index() != 0 or self.remote:
      return
    directory = self.step_directory(step)
    manifest = {'step': step, 'files': file_digests(directory)}
    tmp = os.path.join(directory, MANIFEST + '.tmp')
    with open(tmp, 'w') as f:
      json.dump(manifest, f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, MANIFEST))

  def wait(self) -> None:
    """Block until every save has its files and manifest written."""
    self._finish_write()
    _sync('vlp_jax_checkpoint_saved')

  def check(self, step: int) -> str | None:
    """None when step's files match its manifest; otherwise what is wrong."""
    directory = self.step_directory(step)
    if self.remote:
      return None  # object stores: orbax's own commit marker is the guarantee
    try:
      with open(os.path.join(directory, MANIFEST)) as f:
        expected = json.load(f)['files']
    except (OSError, ValueError, KeyError) as error:
      return f'no complete manifest ({type(error).__name__}: {error})'
    actual = file_digests(directory)
    missing = sorted(set(expected) - set(actual))
    changed = sorted(k for k in expected if k in actual and actual[k] != expected[k])
    if missing or changed:
      return f'files missing {missing[:5]} or changed {changed[:5]} since the save'
    return None

  def quarantine(self, step: int, reason: str) -> str:
    """Move a broken step aside (process 0), reload the manager, and say so; returns the new location."""
    target = paths.join(self.directory, f'corrupt-{step}-{int(time.time())}')
    if jax.process_index() == 0:
      paths.rename(self.step_directory(step), target)
    _sync(f'vlp_jax_quarantine_{step}')
    print(f'Checkpoint step {step} is incomplete or corrupt ({reason}); moved it to {target}.', flush=True)
    self.manager.close()
    self._open()
    return target

  def latest_complete_step(self) -> int | None:
    """The newest step whose files match its manifest, quarantining newer broken ones."""
    while (step := self.latest_step()) is not None:
      problem = self.check(step)
      if problem is None:
        return step
      self.quarantine(step, problem)
    return None

  def restore(self, step: int, abstract_state: Any, data_iterator: grain.DatasetIterator) -> Any:
    """The state with the shardings of `abstract_state` (ShapeDtypeStructs); the iterator is restored in place."""
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        data=grain.checkpoint.CheckpointRestore(data_iterator)))
    return restored['state']

  def close(self) -> None:
    self._finish_write()
    self.manager.close()


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


def load_config(checkpoint_dir: str) -> ml_collections.ConfigDict:
  """The config saved beside a checkpoint (see `checkpoint_files.resolve_checkpoint`): enough to rebuild the model.
  Keys added to the config since the checkpoint was written get their defaults."""
  return with_current_defaults(read_saved_config(checkpoint_dir))


def preprocessing_mismatch(saved_model: ml_collections.ConfigDict, model_config: ml_collections.ConfigDict
                           ) -> dict[str, Any]:
  """{field: the config's value} for each field of config.model.preprocess where a checkpoint's model config
  (`saved_model`) and `model_config` disagree."""
  saved, current = preprocessing_of(saved_model).config(), preprocessing_of(model_config).config()
  return {field: current[field] for field in saved if saved[field] != current[field]}


def _flag_value(value: Any) -> str:
  """A config value as a command-line override writes it: (0.5, 0.5, 0.5) -> '(0.5,0.5,0.5)'."""
  return f'({",".join(str(v) for v in value)})' if isinstance(value, (tuple, list)) else str(value)


# The text tower's keys whose change alters its parameters' shapes or count; no resize is defined for any of them.
TEXT_STRUCTURAL = ('width', 'layers', 'heads', 'mlp_width', 'vocab_size', 'context_length')


def resized_to_model(saved_params: dict, saved_model: ml_collections.ConfigDict,
                     model_config: ml_collections.ConfigDict) -> tuple[dict, list[str]]:
  """A checkpoint's parameters with its image tower resized to the model's image_size and patch_size
  (models/resize.py), and one line per resized variable (from, to, how); unchanged when the sizes agree, and when a
  key with no resize defined (a width, a depth) differs too, which `load_pretrained` refuses naming the variables.
  Raises ValueError for a tower with no resize defined."""
  saved_vision, vision = with_tower_defaults(saved_model.vision), with_tower_defaults(model_config.vision)
  resizable, structural = shape_changes(saved_vision, vision)
  if not resizable or structural or 'visual' not in saved_params:  # a structural change: refused by the caller
    return saved_params, []
  visual, notes = resize_tower(saved_params['visual'], saved_vision, vision, vision_tower(vision).position_prefix)
  return {**saved_params, 'visual': visual}, notes


def unresizable_changes(saved_model: ml_collections.ConfigDict, model_config: ml_collections.ConfigDict) -> list[str]:
  """'config.model.<tower>.<key> (checkpoint a, model b)' for each key with no resize defined that differs."""
  _, structural = shape_changes(with_tower_defaults(saved_model.vision), with_tower_defaults(model_config.vision))
  lines = [f'config.model.vision.{k} (checkpoint {a!r}, model {b!r})' for k, (a, b) in structural.items()]
  return lines + [f'config.model.text.{k} (checkpoint {saved_model.text.get(k)!r}, model {model_config.text.get(k)!r})'
                  for k in TEXT_STRUCTURAL if saved_model.text.get(k) != model_config.text.get(k)]


def load_pretrained(checkpoint_dir: str, params: dict, model_state: dict, model_config: ml_collections.ConfigDict
                    ) -> tuple[dict, dict, list[str]]:
  """Replace the towers' variables in (params, model_state) by a checkpoint's (continue pre-training).

  Variables the checkpoint lacks (heads an objective adds) keep their fresh values and are returned by name. A
  checkpoint at another image_size or patch_size has its image tower resized to the model's (`resized_to_model`;
  each resize printed). Raises ValueError naming every shape mismatch and unexpected variable and every changed key
  with no resize defined (a width, a depth), an activation mismatch (loading OpenAI weights into a GELU model gives
  silently wrong results otherwise), or a preprocessing mismatch (the weights would be trained on pixels other than
  those they were trained or imported with).
  """
  saved_config = load_config(checkpoint_dir)
  if saved_config.model.act != model_config.act:
    raise ValueError(f'config.init.checkpoint was trained with act={saved_config.model.act!r} but '
                     f'config.model.act={model_config.act!r}; set --config.model.act={saved_config.model.act}')
  if (differ := preprocessing_mismatch(saved_config.model, model_config)):
    saved = preprocessing_of(saved_config.model).config()
    flags = ' '.join(f"--config.model.preprocess.{field}='{_flag_value(saved[field])}'" for field in differ)
    raise ValueError(f'config.init.checkpoint={checkpoint_dir} was trained or imported with other image '
                     'preprocessing than config.model.preprocess ('
                     + '; '.join(f'{f}: checkpoint {saved[f]!r}, config {v!r}' for f, v in differ.items())
                     + f'); set {flags}')
  saved_params, saved_state = load_variables(checkpoint_dir)
  saved_params = in_layout(saved_params, BlockStack.from_config(model_config))  # scanned or not, as configured
  saved_params, resized = resized_to_model(saved_params, saved_config.model, model_config)
  for line in resized:
    print(f'Resized {line}', flush=True)
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
  # a depth change can fit (extra blocks fresh): refused all the same, no resize being defined for it
  unresizable = unresizable_changes(saved_config.model, model_config)
  if problems or unresizable:
    raise ValueError(f'config.init.checkpoint={checkpoint_dir} does not fit config.model ({model_config.name}): '
                     + '; '.join(problems[:40] + [f'no resize is defined for {line}' for line in unresizable]))
  return params, model_state, fresh
