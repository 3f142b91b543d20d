"""`TrainContext`: everything one training run works with, built once before the first step (training/loop.py)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import ml_collections
from jax.sharding import Mesh

from vlp_jax.data.loading.record_stats import RecordStats
from vlp_jax.evaluation import Encoder
from vlp_jax.training import stages
from vlp_jax.training.checkpoint import Checkpointer
from vlp_jax.training.progress import Progress
from vlp_jax.training.state import TrainState
from vlp_jax.training.writer import MetricWriter


@dataclasses.dataclass
class TrainContext:
  """The run's parts, and the three things that change as it goes: `state` (rebound by every step), `progress`
  (replaced after the first step, which compiles) and `last_eval` (the latest eval metrics). They live here, not in
  local variables, so that the loop and its hooks (training/hooks.py) always read the current ones."""
  config: ml_collections.ConfigDict
  workdir: str
  checkpointer: Checkpointer
  mesh: Mesh
  objective: Any
  schedule: Callable[[int], Any]  # the learning rate at an optimizer step
  data_iterator: Any  # the grain iterator, saved in every checkpoint
  record_stats: RecordStats
  step_fn: Callable[[TrainState, dict, jax.Array], tuple[TrainState, dict]]
  step_rng: jax.Array
  eval_sets: list
  encoder: Encoder
  writer: MetricWriter
  start_step: int  # the step restored (0 for a fresh run)
  last_step: int  # the step this call stops at: config.total_steps or stop_at_step
  state: TrainState
  progress: Progress
  last_eval: dict[str, float]

  def save(self, step: int) -> None:
    """Checkpoint the current state and data position (the time is kept out of the throughput figures)."""
    self.progress.pause()
    # the config of the state's resolution stage (training/stages.py): the model the saved parameters are of
    self.checkpointer.save(step, self.state, self.data_iterator, stages.state_config(self.config, step))
    self.progress.resume()

  def close(self) -> None:
    """Close the metric files, then finish any checkpoint still being written."""
    self.writer.close()
    self.checkpointer.close()
