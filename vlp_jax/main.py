"""Train entry point: `python -m vlp_jax.main --config=configs/NAME.py --workdir=DIR [--config.key=value ...]`.

A second run with the same workdir resumes from the latest complete checkpoint; a finished run says so and exits.
Exit codes: 0 done; 2 bad config, missing data or unusable workdir (before anything is compiled); 3 too many
consecutive non-finite steps (the last good state is checkpointed); 75 preempted by SIGTERM / SIGINT after
checkpointing the current step (rerun the same command). See docs/reliability.md.
"""
from __future__ import annotations

import sys

from absl import app, flags, logging
from vlp_jax.config import define_config_flag

_CONFIG = define_config_flag()
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics.jsonl and TensorBoard events.')
flags.mark_flags_as_required(['config', 'workdir'])


def report_backend(config) -> None:
  """Print where jax runs (stdout) and, on stderr, one line per mismatch with the config or the visible hardware."""
  import jax

  from vlp_jax import hardware
  backend_line, *warnings = hardware.startup_lines(
      jax.default_backend(), jax.device_count(), jax.process_count(), config.model.dtype, config.mesh.fsdp,
      hardware.visible_accelerators())
  print(backend_line, flush=True)
  for warning in warnings:
    print(warning, file=sys.stderr, flush=True)


def main(argv):
  del argv
  from vlp_jax import config as config_lib, parallel
  from vlp_jax.data.datasets import DataNotFoundError
  from vlp_jax.data.pipeline import DataError
  from vlp_jax.training import guards
  from vlp_jax.training.loop import train_and_evaluate
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  parallel.initialize_distributed()
  config = _CONFIG.value
  report_backend(config)
  try:
    config_lib.validate(config)
    train_and_evaluate(config, _WORKDIR.value)
  except (config_lib.ConfigError, DataNotFoundError, guards.WorkdirError) as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(guards.EXIT_CONFIG)
  except guards.NonFiniteError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(guards.EXIT_NONFINITE)
  except DataError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(guards.EXIT_DATA)
  except guards.Preempted as stop:
    print(str(stop), file=sys.stderr, flush=True)
    sys.exit(guards.EXIT_PREEMPTED)


if __name__ == '__main__':
  app.run(main)
