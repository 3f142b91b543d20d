"""The errors a user can cause (bad config, missing or broken data, an unusable workdir, a diverging run, a stop
signal) and the exit code each gives in every command (docs/reliability.md):

  0   finished (or already finished)
  2   bad config or request, missing data or an unusable workdir: nothing was compiled or written
  3   too many consecutive non-finite steps: the last good state is checkpointed
  4   the training data is broken: a shard has more than data.max_bad_fraction bad records (named in the message);
      the state at the step that found it is checkpointed
  75  preempted (SIGTERM / SIGINT): the current step finished and was checkpointed; rerun the same command
"""
from __future__ import annotations

from vlp_jax.registry import RegistryError

EXIT_CONFIG = 2
EXIT_NONFINITE = 3
EXIT_DATA = 4  # the training data is broken (too many bad records)
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: try again


class ConfigError(RegistryError):
  """A config value (or a command's request) is invalid; the message names the key or flag."""


class DataNotFoundError(FileNotFoundError):
  """No data where the config says it is; the message says how to prepare it."""


class DataError(RuntimeError):
  """Too many bad records: the message names the shard(s)."""


class WorkdirError(OSError):
  """The workdir cannot be created or written; the message names the path and the cause."""


class NonFiniteError(FloatingPointError):
  """Too many consecutive steps with a non-finite loss or gradient."""


class Preempted(Exception):
  """A stop signal arrived; the run checkpointed `step` and stopped."""

  def __init__(self, step: int, signal_name: str, checkpoint_dir: str):
    super().__init__(f'{signal_name} received: stopped after step {step} and saved a checkpoint in '
                     f'{checkpoint_dir}. Run the same command to resume.')
    self.step = step


def exit_code(error: BaseException) -> int | None:
  """The exit code of a user-facing error; None for anything else (a bug: let it raise with its traceback)."""
  if isinstance(error, Preempted):
    return EXIT_PREEMPTED
  if isinstance(error, NonFiniteError):
    return EXIT_NONFINITE
  if isinstance(error, DataError):
    return EXIT_DATA
  if isinstance(error, (RegistryError, DataNotFoundError, WorkdirError)):
    return EXIT_CONFIG
  return None
