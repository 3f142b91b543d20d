"""Gradient accumulation as an objective admits it (`config.accumulation`; the implementation is
training/accumulation.py): 'none'; 'decoupled', exact for every objective (its `features` are per example, its loss
runs on the whole batch of features); 'microbatch', the mean of micro-batch gradients, exact only for an objective
whose loss is a mean of per-example losses (`per_example_loss`)."""
from __future__ import annotations

import ml_collections

from vlp_jax.registry import check_choice

MODES = ('none', 'decoupled', 'microbatch')


def num_micro_batches(config: ml_collections.ConfigDict) -> int:
  """Micro-batches per step: batch_size / accumulation.micro_batch_size, or 1 without accumulation."""
  acc = config.accumulation
  return 1 if acc.mode == 'none' else config.batch_size // acc.micro_batch_size


def validate(config: ml_collections.ConfigDict, objective_cls: type, terms: dict[str, type],
             num_devices: int | None) -> None:
  """Raise ValueError naming the key when config.accumulation does not fit the batch, the devices or the objective
  (`objective_cls` and its `terms`, by name)."""
  check_choice('accumulation.mode', config.accumulation.mode, MODES)
  acc = config.accumulation
  if acc.mode == 'none':
    return
  size = acc.micro_batch_size
  if not isinstance(size, int) or isinstance(size, bool) or size < 1 or config.batch_size % size:
    raise ValueError(f"config.accumulation.mode='{acc.mode}' needs config.accumulation.micro_batch_size to be a "
                     f'positive divisor of config.batch_size={config.batch_size}, got {size!r}')
  if num_devices is not None and size % num_devices:
    raise ValueError(f'config.accumulation.micro_batch_size={size} must be divisible by the device count '
                     f'{num_devices} (every micro-batch is split over all devices)')
  if acc.mode == 'microbatch':
    coupled = [f"objective '{objective_cls.name}'"] if not objective_cls.per_example_loss else []
    coupled += [f"term '{name}'" for name, term in terms.items() if not term.per_example_loss]
    if coupled:
      raise ValueError(
          f"config.accumulation.mode='microbatch' averages micro-batch gradients, which silently changes the loss of "
          f"config.objective ({', '.join(coupled)}): its loss couples every pair of examples in the batch. Use "
          f"config.accumulation.mode='decoupled', which gives the exact full-batch gradient.")
