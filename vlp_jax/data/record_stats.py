"""What the training data actually delivered: examples per source and records skipped per reason, as metrics, and
the stop when a shard is mostly bad.

The pipeline tags every example with its record's status (pipeline.LoadExamples: 'record_error', 'record_shard',
'record_source'). `RecordStats` counts those tags on the host. With several processes the counts are summed over
all of them when metrics are read (at log steps, which every process reaches together), so every process sees the
same totals and takes the same decision to stop.
"""
from __future__ import annotations

import jax
import numpy as np

from vlp_jax.data import records
from vlp_jax.errors import DataError

# A shard is judged once this many of its records have been read, so that one early bad record is not a verdict.
MIN_RECORDS_TO_JUDGE = 20


class RecordStats:
  """Counts of the records read since this process started: by shard and status, and by source.

  shard_paths: the training shards, in the order of their ids; source_names: the sources, in the order of their ids
  (an id of len(source_names) means another source); max_bad_fraction: the share of bad records, in any one shard,
  that stops the run.
  """

  def __init__(self, shard_paths: list[str], source_names: tuple[str, ...], max_bad_fraction: float):
    self.shard_paths, self.source_names, self.max_bad_fraction = list(shard_paths), source_names, max_bad_fraction
    self._by_shard = np.zeros((len(shard_paths), 1 + len(records.SKIP_REASONS)), np.int64)  # column 0: good
    self._by_source = np.zeros(len(source_names) + 1, np.int64)
    self._reported_sources = np.zeros_like(self._by_source)

  def update(self, status: dict[str, np.ndarray]) -> None:
    """Adds one batch's status fields ([B] each) from pipeline.pop_status."""
    np.add.at(self._by_shard, (status['record_shard'], status['record_error']), 1)
    np.add.at(self._by_source, status['record_source'], 1)

  def _totals(self) -> tuple[np.ndarray, np.ndarray]:
    """(by shard [N, 1 + R], by source [S + 1]) summed over processes."""
    if jax.process_count() == 1:
      return self._by_shard, self._by_source
    from jax.experimental import multihost_utils
    flat = np.concatenate([self._by_shard.ravel(), self._by_source])
    flat = np.asarray(multihost_utils.process_allgather(flat)).sum(axis=0)
    return flat[:self._by_shard.size].reshape(self._by_shard.shape), flat[self._by_shard.size:]

  def metrics(self) -> dict[str, float]:
    """The data metrics, and the check: raises DataError naming the shards whose share of bad records is above
    max_bad_fraction. Call it at the same steps on every process.

    train/data/examples/<source>: examples read from the source so far; train/data/fraction/<source>: its share of
    the examples since the previous call (the mix as it is now); train/data/skipped/<reason>: bad records replaced
    so far; train/data/skipped_fraction: their share of all records read.
    """
    by_shard, by_source = self._totals()
    metrics = {}
    names = self.source_names + ('other',)
    recent = by_source - self._reported_sources
    self._reported_sources = by_source.copy()
    for k, name in enumerate(names):
      if by_source[k] or k < len(self.source_names):
        metrics[f'train/data/examples/{name}'] = float(by_source[k])
        metrics[f'train/data/fraction/{name}'] = float(recent[k] / max(1, recent.sum()))
    skipped = by_shard[:, 1:].sum(axis=0)
    for reason, count in zip(records.SKIP_REASONS, skipped):
      metrics[f'train/data/skipped/{reason}'] = float(count)
    metrics['train/data/skipped_fraction'] = float(skipped.sum() / max(1, by_shard.sum()))
    self._check(by_shard)
    return metrics

  def _check(self, by_shard: np.ndarray) -> None:
    seen, bad = by_shard.sum(axis=1), by_shard[:, 1:].sum(axis=1)
    failing = np.flatnonzero((seen >= MIN_RECORDS_TO_JUDGE) & (bad > self.max_bad_fraction * seen))
    if not len(failing):
      return
    lines = []
    for shard in failing[:10]:
      reasons = ', '.join(f'{r} {n}' for r, n in zip(records.SKIP_REASONS, by_shard[shard, 1:]) if n)
      lines.append(f'  {self.shard_paths[shard]}: {bad[shard]} of {seen[shard]} records bad ({reasons})')
    more = f'\n  ... and {len(failing) - 10} more shards' if len(failing) > 10 else ''
    raise DataError(
        f'{len(failing)} training shard(s) have more than data.max_bad_fraction={self.max_bad_fraction} bad records '
        f'(bad records are replaced by good neighbours, but this many means the data is broken):\n'
        + '\n'.join(lines) + more + '\nRe-convert these shards (python -m vlp_jax.convert drops unusable '
        'records and counts them per reason), remove them from data.path, or raise data.max_bad_fraction.')
