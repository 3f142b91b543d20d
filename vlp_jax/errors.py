"""The errors a user can cause (bad config, missing or broken data, an unusable workdir, a diverging run, a stop
signal) and the exit code each gives in every command (docs/reliability.md):

  0   finished (or already finished)
  2   bad config or request, missing data or an unusable workdir: nothing was compiled or written
  3   too many consecutive non-finite steps: the last good state is checkpointed
  4   the training data is broken: a shard has more than data.max_bad_fraction bad records (named in the message);
      the state at the step that found it is checkpointed
  75  preempted (SIGTERM / SIGINT on any process): every process checkpointed the same step; rerun the same command
  76  a peer process was lost (killed, crashed, stopped or unreachable): the run stopped at once, without a
      checkpoint; rerun the same command (it resumes from the last complete checkpoint)
  77  a step hung: no step finished within config.watchdog's time (every thread's stack is in the log); rerun the
      same command, and look at the stacks if it hangs again

75-77 are retryable: a scheduler may restart the whole job on them (launch/tpu_pod.sh, launch/slurm.sbatch).
"""
from __future__ import annotations

from vlp_jax.registry import RegistryError

EXIT_CONFIG = 2
EXIT_NONFINITE = 3
EXIT_DATA = 4  # the training data is broken (too many bad records)
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: try again
EXIT_PEER_LOST = 76  # another process of a multi-process job died or stopped answering (training/watchdog.py)
EXIT_HUNG = 77  # no step finished in time (training/watchdog.py)
RETRYABLE_EXIT_CODES = (EXIT_PREEMPTED, EXIT_PEER_LOST, EXIT_HUNG)


class ConfigError(RegistryError):
  """A config value (or a command's request) is invalid; the message names the key or flag."""


class MissingInputError(ConfigError):
  """The config needs an input it does not name (teacher embeddings, a checkpoint to start from). `config.validate`
  runs every other check first and then lists all of them at once; the trainer adds the data and files not found."""

  def __init__(self, *messages: str):
    super().__init__('\n'.join(messages))
    self.messages = list(messages)  # one per missing input, each with its fix


class DataNotFoundError(FileNotFoundError):
  """No data where the config says it is; the message says how to prepare it."""


class DataError(RuntimeError):
  """Too many bad records: the message names the shard(s)."""


class WorkdirError(OSError):
  """The workdir cannot be created or written; the message names the path and the cause."""


class NonFiniteError(FloatingPointError):
  """Too many consecutive steps with a non-finite loss or gradient."""


class Preempted(Exception):
  """A stop signal arrived; the run checkpointed `step` and stopped. `signal_name` None: another process of the
  job received it, and this one stopped at the step they agreed on."""

  def __init__(self, step: int, signal_name: str | None, checkpoint_dir: str):
    cause = f'{signal_name} received' if signal_name else 'another process received a stop signal'
    super().__init__(f'{cause}: stopped after step {step} and saved a checkpoint in {checkpoint_dir}. Run the same '
                     'command to resume.')
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
