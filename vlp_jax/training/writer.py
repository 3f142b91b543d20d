"""Metrics to `workdir/metrics.jsonl` (one JSON object per line, always with "step") and TensorBoard events."""
from __future__ import annotations

import json
import os
import time

import jax


class MetricWriter:
  """Writes on process 0 only. On resume, lines past the restored step are dropped: they are re-done."""

  def __init__(self, workdir: str, resume_step: int = 0):
    self.active = jax.process_index() == 0
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self._tb = None
    if not self.active:
      return
    os.makedirs(workdir, exist_ok=True)
    if os.path.exists(self.path):
      with open(self.path) as f:
        kept = [line for line in f if line.strip() and json.loads(line)['step'] <= resume_step]
      tmp = self.path + '.tmp'
      with open(tmp, 'w') as f:
        f.writelines(kept)
      os.replace(tmp, self.path)
    from tensorboardX import SummaryWriter
    self._tb = SummaryWriter(workdir, flush_secs=10)

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self.active:
      return
    record = {'step': int(step), 'time': time.time(), **{k: float(v) for k, v in metrics.items()}}
    with open(self.path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    for name, value in metrics.items():
      self._tb.add_scalar(name, float(value), int(step))

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


def read_metrics(workdir: str) -> list[dict]:
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
