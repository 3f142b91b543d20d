"""Where the metrics go: `MetricWriter` sends every write to each of its backends, on process 0 only:

  JsonLines    `workdir/metrics.jsonl`, one JSON object per line, always with "step" (what the code reads back)
  TensorBoard  event files in the workdir (`tensorboard --logdir WORKDIR`)
  WandB        a Weights & Biases run, when config.log.wandb_project is set (`pip install wandb`, an optional
               dependency imported here only then): the same scalars at the same steps, the config (flattened) as
               the run's config, and the end-of-run plots as images. Its run id is kept in `workdir/wandb_run_id`,
               so that a resumed run goes on in the same W&B run.

Every backend gets the same scalars (`write`) and images (`write_images`: name -> PNG path) at the same steps.
"""
from __future__ import annotations

import io
import json
import os
import secrets
import tempfile
import time
from typing import Any, Protocol

import jax
import ml_collections
from PIL import Image

from vlp_jax import errors, paths
from vlp_jax.training import event_file

WANDB_RUN_ID_FILE = 'wandb_run_id'


class Backend(Protocol):
  def scalars(self, step: int, metrics: dict[str, float]) -> None: ...
  def images(self, step: int, paths: dict[str, str]) -> None: ...
  def close(self) -> None: ...


class JsonLines:
  """metrics.jsonl. On resume, lines past the restored step are dropped: they are re-done. Images are not kept.
  On an object store the object is rewritten at each write (`paths.AppendableFile`): every record is in the bucket
  before the next checkpoint, so a resumed run never lacks one."""

  def __init__(self, path: str, resume_step: int):
    self.path = path
    kept = ''
    if paths.exists(path):
      lines = paths.read_text(path).splitlines(keepends=True)
      kept = ''.join(line for line in lines if line.strip() and json.loads(line)['step'] <= resume_step)
      paths.write_text(path, kept)
    self._file = paths.AppendableFile(path, initial=kept.encode())

  def scalars(self, step: int, metrics: dict[str, float]) -> None:
    record = {'step': step, 'time': time.time(), **metrics}
    self._file.write((json.dumps(record) + '\n').encode())
    self._file.flush()

  def images(self, step: int, paths: dict[str, str]) -> None:
    pass

  def close(self) -> None:
    self._file.close()


class TensorBoard:
  """Scalars and images as TensorBoard events in the workdir (`event_file`)."""

  def __init__(self, workdir: str):
    self._events = event_file.EventFileWriter(workdir)

  def scalars(self, step: int, metrics: dict[str, float]) -> None:
    now = time.time()
    for name, value in metrics.items():
      self._events.write(event_file.scalar_event(now, step, name, float(value)))
    self._events.flush()

  def images(self, step: int, paths: dict[str, str]) -> None:
    for name, path in paths.items():
      png, (width, height), channels = png_for_tensorboard(path)
      self._events.write(event_file.image_event(time.time(), step, name, png, height, width, channels))
    self._events.flush()

  def close(self) -> None:
    self._events.close()


def png_for_tensorboard(path: str) -> tuple[bytes, tuple[int, int], int]:
  """(PNG bytes, (width, height), channels) of the image at `path`: a grey, RGB or RGBA PNG as it is, anything else
  converted to an RGB PNG. `path` may be on an object store."""
  data = paths.read_bytes(path)
  with Image.open(io.BytesIO(data)) as image:
    if image.format == 'PNG' and image.mode in _CHANNELS:
      return data, image.size, _CHANNELS[image.mode]
    buffer = io.BytesIO()
    image.convert('RGB').save(buffer, format='PNG')
    return buffer.getvalue(), image.size, 3


_CHANNELS = {'L': 1, 'RGB': 3, 'RGBA': 4}


def import_wandb(project: str):
  """The wandb module; a ConfigError (exit code 2) saying how to install it when it is not installed."""
  try:
    import wandb
  except ImportError as error:
    raise errors.ConfigError(
        f'config.log.wandb_project={project!r} sends the metrics to Weights & Biases, but wandb is not installed '
        f'({error}): `pip install wandb` (or `pip install -e ".[wandb]"`), or leave config.log.wandb_project '
        "empty ('') to log to metrics.jsonl and TensorBoard only") from None
  return wandb


def check_backends(config: ml_collections.ConfigDict) -> None:
  """Before anything is built or compiled: raise ConfigError when a backend the config asks for cannot be used
  (config.log.wandb_project without wandb installed). Every process checks, so that all of them stop alike."""
  if config.log.wandb_project:
    import_wandb(config.log.wandb_project)


def wandb_run_id(workdir: str, resume_step: int) -> str:
  """The W&B run id of the run in `workdir`: the one in `workdir/wandb_run_id` when the run resumes from a
  checkpoint (resume_step > 0), else a new one, written there. A fresh start, whose metrics.jsonl also starts over,
  is a new W&B run."""
  paths.makedirs(workdir)
  path = paths.join(workdir, WANDB_RUN_ID_FILE)
  if resume_step > 0 and paths.exists(path):
    run_id = paths.read_text(path).strip()
    if run_id:
      return run_id
  run_id = secrets.token_hex(6)  # 12 characters of [0-9a-f], as W&B's own ids
  paths.write_text(path, run_id + '\n')
  return run_id


def flat_config(config: ml_collections.ConfigDict | dict) -> dict[str, Any]:
  """{'optim.lr': 5e-4, 'model.vision.width': 768, ...}: the config's leaves under dotted keys."""
  flat = {}

  def walk(prefix: str, value: Any) -> None:
    if isinstance(value, (dict, ml_collections.ConfigDict)):
      for key in value.keys():
        walk(f'{prefix}{key}.', value[key])
    else:
      flat[prefix[:-1]] = list(value) if isinstance(value, tuple) else value

  walk('', config.to_dict() if isinstance(config, ml_collections.ConfigDict) else config)
  return flat


class WandB:
  """A W&B run (`wandb.init(resume='allow')` with the id of `wandb_run_id`): project, entity, mode and name from
  config.log. Its files go to $WANDB_DIR if set, else to `workdir/wandb/` (for a workdir on an object store, which
  wandb cannot write to, to the system's temporary folder).

  A resumed run redoes the steps after its checkpoint; W&B keeps the values it already has for them (the same, as
  resuming is exact) and takes the steps after the last one it holds."""

  def __init__(self, workdir: str, config: ml_collections.ConfigDict, resume_step: int):
    log = config.log
    self._wandb = import_wandb(log.wandb_project)
    name = log.wandb_run_name or paths.basename(paths.absolute(workdir))
    local_dir = tempfile.gettempdir() if paths.is_remote(workdir) else workdir
    # dir explicitly, also from $WANDB_DIR: wandb reads the environment once per process, at its first run.
    self.run = self._wandb.init(project=log.wandb_project, entity=log.wandb_entity or None, name=name,
                                id=wandb_run_id(workdir, resume_step), resume='allow', mode=log.wandb_mode,
                                dir=os.environ.get('WANDB_DIR') or local_dir)
    # After init, not through it: a resumed run may change values (a longer total_steps), which init would refuse.
    self.run.config.update(flat_config(config), allow_val_change=True)

  def _skip(self, step: int) -> bool:
    return step < (getattr(self.run, 'step', 0) or 0)  # a step a resumed run redoes, which W&B already has

  def scalars(self, step: int, metrics: dict[str, float]) -> None:
    if not self._skip(step):
      self.run.log(dict(metrics), step=step)

  def images(self, step: int, paths: dict[str, str]) -> None:
    if paths and not self._skip(step):
      self.run.log({name: self._wandb_image(path) for name, path in paths.items()}, step=step)

  def _wandb_image(self, path: str):
    """wandb reads local files only: an image on an object store is read here and handed over decoded."""
    if not paths.is_remote(path):
      return self._wandb.Image(path)
    with Image.open(io.BytesIO(paths.read_bytes(path))) as image:
      return self._wandb.Image(image.copy())

  def close(self) -> None:
    self.run.finish()


class MetricWriter:
  """Writes on process 0 only, to metrics.jsonl, TensorBoard and, with config.log.wandb_project, W&B. On resume,
  metrics.jsonl drops the lines past the restored step: they are re-done."""

  def __init__(self, workdir: str, resume_step: int = 0, config: ml_collections.ConfigDict | None = None):
    self.active = jax.process_index() == 0
    self.path = paths.join(workdir, 'metrics.jsonl')
    self._backends: list[Backend] = []
    if not self.active:
      return
    paths.makedirs(workdir)
    self._backends = [JsonLines(self.path, resume_step), TensorBoard(workdir)]
    if config is not None and config.log.wandb_project:
      try:
        self._backends.append(WandB(workdir, config, resume_step))
      except BaseException:
        self.close()
        raise

  def write(self, step: int, metrics: dict[str, float]) -> None:
    """The same scalars, as Python floats, to every backend at `step`."""
    if not self._backends:
      return
    step, metrics = int(step), {name: float(value) for name, value in metrics.items()}
    for backend in self._backends:
      backend.scalars(step, metrics)

  def write_images(self, step: int, paths: dict[str, str]) -> None:
    """PNG files (name -> path, e.g. {'plots/curves': 'WORKDIR/curves.png'}) as images at `step`, where the backend
    keeps images (TensorBoard, W&B)."""
    for backend in self._backends:
      backend.images(int(step), paths)

  def close(self) -> None:
    for backend in self._backends:
      backend.close()
    self._backends = []


def read_metrics(workdir: str) -> list[dict]:
  path = paths.join(workdir, 'metrics.jsonl')
  if not paths.exists(path):
    return []
  return [json.loads(line) for line in paths.read_text(path).splitlines() if line.strip()]
