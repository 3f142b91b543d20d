"""Train: `python -m vlp_jax.main --config=configs/NAME.py --workdir=DIR [--config.key=value ...]`.

A second run with the same workdir resumes from the latest complete checkpoint; a finished run says so and exits.
Exit codes (vlp_jax/errors.py, the same in every command, cli/common.py): 0 done; 2 bad flags, bad config, missing
data or unusable workdir (before anything is compiled); 3 too many consecutive non-finite steps (the last good state
is checkpointed); 4 broken training data; 75 preempted by SIGTERM / SIGINT after checkpointing the current step
(rerun the same command); 76 a peer process lost; 77 a step hung (both retryable). See docs/reliability.md.
"""
from __future__ import annotations

import sys

import jax
from absl import flags, logging

from vlp_jax import config as config_lib
from vlp_jax import hardware, parallel
from vlp_jax.cli import allocator, common
from vlp_jax.training.loop import train_and_evaluate


def define_flags() -> None:
  """--config (a config file, with `--config.key=value` overrides) and --workdir, on absl's FLAGS."""
  config_lib.define_config_flag()
  flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics.jsonl and TensorBoard events.')
  flags.DEFINE_integer('stop_at_step', 0, 'Stop at this step, with a checkpoint, on the schedule of '
                       'config.total_steps (a part of a run); 0 = run to config.total_steps.', lower_bound=0)
  common.define_verbose_flag()
  flags.mark_flags_as_required(['config', 'workdir'])


def report_backend(config) -> None:
  """Print where jax runs (stdout) and, on stderr, one line per mismatch with the config or the visible hardware, then
  the config's advisories."""
  backend_line, *warnings = hardware.startup_lines(
      jax.default_backend(), jax.device_count(), jax.process_count(), config.model.dtype, config.mesh.fsdp,
      hardware.visible_accelerators())
  print(backend_line, flush=True)
  for warning in [*warnings, *config_lib.advisories(config)]:
    print(warning, file=sys.stderr, flush=True)


def command(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Train (or resume) the run of --config in --workdir; raises the user-facing errors of vlp_jax/errors.py."""
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  common.show_details(flag_values.verbose)
  config = config_lib.config_from_flag(flag_values)
  parallel.initialize_distributed(**config.distributed)  # the timeouts of config.distributed
  report_backend(config)
  train_and_evaluate(config, flag_values.workdir, flag_values.stop_at_step or None)


def run_command() -> None:
  """The command line: `python -m vlp_jax.main`."""
  # A speed setting of this CPU trainer, not of the library: before jax starts its CPU client's threads.
  allocator.retain_freed_memory()
  common.run(command, define_flags)


if __name__ == '__main__':
  run_command()
