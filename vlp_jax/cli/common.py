"""What every command shares: absl's `app.run` with one mapping of errors to exit codes.

A command is `define_flags` (its absl flags, defined when it runs, so that the commands' flags never clash in one
process) and `command(argv, flag_values)`, which raises the user-facing errors of vlp_jax/errors.py. `run` gives
every one of them the same exit codes (`errors.exit_code`): a bad flag (unknown, missing, of the wrong type), an
unexpected argument and a bad request (each command's error is an `errors.ConfigError`) all exit 2 with one
`error: ...` line on stderr and no traceback; anything else is a bug and raises. A command with `--verbose`
(`define_verbose_flag`) prints the package's INFO log lines too (`show_details`): details such as why an eval set
skips a task, which the default output leaves out.
"""
from __future__ import annotations

import logging
import sys
import traceback
from typing import Any, Callable, Sequence

from absl import app, flags

from vlp_jax import errors

HELP_FLAGS = ('help', 'helpshort', 'helpfull', 'helpxml', '?')  # absl's
Command = Callable[..., Any]  # command(argv, flag_values=flags.FLAGS): argv[0] is the program, then the arguments
PACKAGE_LOGGER = 'vlp_jax'  # the library's modules log to children of it (logging.getLogger(__name__))


class _PrintLines(logging.Handler):
  """Each log record printed as its bare message on the current stdout, as the commands print everything else."""

  def emit(self, record: logging.LogRecord) -> None:
    print(self.format(record), flush=True)


def define_verbose_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  flags.DEFINE_bool('verbose', False, 'Also print details, such as why an eval set skips a task (what it lacks).',
                    flag_values=flag_values)


def show_details(verbose: bool) -> None:
  """With `verbose`, the package's INFO log lines are printed as plain lines on stdout; without, the package logs as
  before (warnings only, through absl). Called once per command, so a second in-process run starts afresh."""
  logger = logging.getLogger(PACKAGE_LOGGER)
  for handler in [h for h in logger.handlers if isinstance(h, _PrintLines)]:
    logger.removeHandler(handler)
  logger.setLevel(logging.INFO if verbose else logging.NOTSET)
  logger.propagate = not verbose
  if verbose:
    logger.addHandler(_PrintLines())


def exit_on_user_error(fn: Callable[..., Any], *args, **kwargs) -> Any:
  """fn(*args, **kwargs); a user-facing error (vlp_jax/errors.py) prints its message and exits with its code."""
  try:
    return fn(*args, **kwargs)
  except Exception as error:  # pylint: disable=broad-except
    code = errors.exit_code(error)
    if code is None:
      raise
    print(str(error) if code == errors.EXIT_PREEMPTED else f'error: {error}', file=sys.stderr, flush=True)
    sys.exit(code)


def parse_flags(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS,
                define_flags: Callable[[], Any] | None = None) -> list[str]:
  """Define the flags (`define_flags()`, when given) and parse `argv` (the program name first) into `flag_values`:
  the arguments that are not flags, the program name first. A bad flag is a bad request: `errors.ConfigError`."""
  try:
    if define_flags is not None:
      define_flags()
    return flag_values(list(argv))
  except flags.Error as error:
    raise errors.ConfigError(f'{error}\n--help lists the flags.') from None
  except SystemExit as exit_:
    # absl's --help / --helpshort / --helpfull print the usage and exit 1; asking for help is no failure
    if exit_.code == 1 and any(arg.lstrip('-').split('=')[0] in HELP_FLAGS for arg in argv[1:]):
      raise SystemExit(0) from None
    raise
  except Exception as error:  # pylint: disable=broad-except
    # absl's own parsers raise flags.Error; anything else comes from running a --config file (no get_config, an
    # error inside it): name the file and line instead of a traceback through ml_collections
    frames = [f'{frame.filename}:{frame.lineno}' for frame in traceback.extract_tb(error.__traceback__)
              if not any(part in frame.filename for part in ('ml_collections', 'absl', 'vlp_jax/cli'))]
    config_file = next((arg.split('=', 1)[1] for arg in argv if arg.startswith('--config=')), 'the config file')
    raise errors.ConfigError(f'--config: loading {frames[-1] if frames else config_file} failed: '
                             f'{type(error).__name__}: {error}') from None


def _check_arguments(argv: Sequence[str], takes_arguments: bool) -> None:
  if len(argv) > 1 and not takes_arguments:
    raise errors.ConfigError(f'unexpected arguments {list(argv[1:])}: every option is a --flag (--help lists them)')


def run(command: Command, define_flags: Callable[[], Any], *, takes_arguments: bool = False) -> None:
  """The command line: `app.run(command)` with the flags of `define_flags()` (defined on absl's FLAGS), and every
  user-facing error, from parsing the flags to the end of `command`, mapped to its exit code. Only a command that
  `takes_arguments` (weights: import / export) may be given arguments besides flags."""
  def define() -> None:
    defined = set(flags.FLAGS)
    define_flags()
    # `--help` lists the key flags of the program's main module: make the command's flags those of the module that
    # `python -m vlp_jax.NAME` runs (the alias at the package root, which defines none).
    for name in set(flags.FLAGS) - defined:
      flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])

  def main(argv: list[str]) -> None:
    _check_arguments(argv, takes_arguments)
    command(argv)

  app.run(lambda argv: exit_on_user_error(main, argv),
          flags_parser=lambda argv: exit_on_user_error(parse_flags, argv, flags.FLAGS, define))


def run_in_process(command: Command, define_flags: Callable[[flags.FlagValues], Any], argv: Sequence[str], *,
                   takes_arguments: bool = False) -> int:
  """`command` on `argv` (the program name first) as `run` runs it, but in this process and with the flags in a
  FlagValues of their own (absl's FLAGS stay untouched): the exit code, the messages on stderr. For scripts and
  tests."""
  flag_values = flags.FlagValues()

  def parse_and_run() -> None:
    args = parse_flags(argv, flag_values, lambda: define_flags(flag_values))
    _check_arguments(args, takes_arguments)
    command(args, flag_values)

  try:
    exit_on_user_error(parse_and_run)
  except SystemExit as exit_:
    return 0 if exit_.code is None else exit_.code
  return 0
