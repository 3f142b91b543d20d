"""What the training data actually delivered: examples per source and records skipped per reason, as metrics, a
line on stdout for each bad record as it is met, and the stop when a shard, or the data as a whole, is too bad.

The stop is a test, not a threshold on a ratio: with 100k shards a per-shard ratio judged after a few dozen reads
fires on noise (at 0.5% bad records, a run stops with probability about 0.9). A shard is stopped once its counts are
strong evidence that its share of bad records is above `data.max_bad_fraction` p0: `excess_evidence`, the log of a
likelihood ratio (bad rate uniform on [p0, 1] against p0), passes log((N + 1) / alpha) for N shards; the whole data
is tested alike on its summed counts. Under independent reads the ratio of a source at or below p0 is a
supermartingale, so by Ville's inequality each test fires with probability at most alpha / (N + 1) however often it is
looked at, and a run whose shards are all at or below p0 is ever stopped with probability at most alpha
(`data.bad_data_alpha`, Bonferroni over the N + 1 tests). A shard of 50% bad records is stopped after about 40 reads
(p0 = 0.1, 100k shards, alpha = 0.01).

The pipeline tags every example with its record's status (pipeline.LoadExamples: 'record_error', 'record_shard',
'record_source', and a bad record's 'record_key' and 'record_detail'). `RecordStats` counts those tags on the host.
With several processes the counts are summed over all of them when metrics are read (at log steps, which every
process reaches together), so every process sees the same totals and takes the same decision to stop; each process
names the bad records it reads itself. The batches, and so these lines, come in the same order in every run.
"""
from __future__ import annotations

import jax
import numpy as np
from scipy import special

from vlp_jax.data.storage import records
from vlp_jax.errors import DataError

# Bad records named on stdout: the first few of each shard, then one line for the shard at 10, 100, 1000, ... of
# them, so that a broken shard cannot flood the log; past MAX_NAMED lines in a run, only those shard lines.
NAMED_PER_SHARD = 3
MAX_NAMED = 100


def excess_evidence(seen: np.ndarray, bad: np.ndarray, max_bad_fraction: float) -> np.ndarray:
  """[N] counts of records read and of bad ones -> [N] log evidence that each bad rate is above `max_bad_fraction`
  p0: log of the mean likelihood ratio of a rate p against p0 over p uniform on [p0, 1],
  log(integral_p0^1 p^k (1 - p)^(n - k) dp / ((1 - p0) p0^k (1 - p0)^(n - k))). 0 for no reads; -inf for p0 = 1
  (no rate is above it); +inf for p0 = 0 and any bad record."""
  n, k = np.asarray(seen, np.float64), np.asarray(bad, np.float64)
  if max_bad_fraction >= 1:
    return np.full(n.shape, -np.inf)
  if max_bad_fraction <= 0:  # the mixture over [0, 1] against a rate of 0: any bad record is proof
    return np.where(k > 0, np.inf, special.betaln(k + 1, n - k + 1))
  p0 = max_bad_fraction
  with np.errstate(divide='ignore'):  # betaincc underflows to 0 when k / n is far below p0: evidence -inf
    upper = np.log(special.betaincc(k + 1, n - k + 1, p0))
  return special.betaln(k + 1, n - k + 1) + upper - np.log1p(-p0) - k * np.log(p0) - (n - k) * np.log1p(-p0)


def evidence_to_stop(num_shards: int, alpha: float) -> float:
  """The evidence (log likelihood ratio) at which a shard or the whole data stops a run: log((N + 1) / alpha), so
  that the N shard tests and the global one together stop a run of data within its limit with probability at most
  alpha."""
  return float(np.log((num_shards + 1) / alpha))


def bad_data_verdict(seen: np.ndarray, bad: np.ndarray, max_bad_fraction: float, alpha: float
                     ) -> tuple[np.ndarray, bool]:
  """(ids of the shards shown to hold more than `max_bad_fraction` bad records, whether the data as a whole is)
  from [N] counts per shard of records read and bad ones; see the module docstring for the rule and its bound."""
  threshold = evidence_to_stop(len(seen), alpha)
  # a shard whose share of bad records is at most the limit has no evidence against it (every rate above the limit
  # fits its counts worse than the limit does): only the others are evaluated, a few among 100k shards
  over = np.flatnonzero(np.asarray(bad) > max_bad_fraction * np.asarray(seen))
  failing = over[excess_evidence(np.asarray(seen)[over], np.asarray(bad)[over], max_bad_fraction) >= threshold]
  whole = bool(excess_evidence(np.sum(seen), np.sum(bad), max_bad_fraction) >= threshold)
  return failing, whole


def is_power_of_ten(n: int) -> bool:
  """10, 100, 1000, ...: the counts at which a shard's bad records are summarised."""
  return n >= 10 and str(n).rstrip('0') == '1'


class RecordStats:
  """Counts of the records read since this process started: by shard and status, and by source.

  shard_paths: the training shards, in the order of their ids; source_names: the sources, in the order of their ids
  (an id of len(source_names) means another source); max_bad_fraction: the share of bad records, in any one shard or
  in all, that stops the run once the counts show it (`bad_data_verdict`); alpha: the bound on the probability that
  data within that limit stops a run.
  """

  def __init__(self, shard_paths: list[str], source_names: tuple[str, ...], max_bad_fraction: float,
               alpha: float = 0.01):
    self.shard_paths, self.source_names, self.max_bad_fraction = list(shard_paths), source_names, max_bad_fraction
    self.alpha = alpha
    # {part: bytes} of the files the data memory-maps (the webdataset index, the teacher table), which the host holds
    # once in its page cache: the start-up memory line (data/loading/host_memory.py); set by formats.train_batches
    self.mapped_bytes: dict[str, int] = {}
    self._by_shard = np.zeros((len(shard_paths), 1 + len(records.SKIP_REASONS)), np.int64)  # column 0: good
    self._by_source = np.zeros(len(source_names) + 1, np.int64)
    self._reported_sources = np.zeros_like(self._by_source)
    self._bad_total = self._named = 0  # bad records read by this process, and lines that named one

  def update(self, status: dict[str, np.ndarray]) -> None:
    """Adds one batch's status fields ([B] each) from pipeline.pop_status, and names its bad records on stdout."""
    errors, shards = status['record_error'], status['record_shard']
    unnamed = np.full(len(errors), '')
    keys, details = status.get('record_key', unnamed), status.get('record_detail', unnamed)
    for row in np.flatnonzero(errors):  # in batch order, counted one by one for the running counts
      self._by_shard[shards[row], errors[row]] += 1
      self._bad_total += 1
      self._report(int(shards[row]), int(errors[row]), str(keys[row]), str(details[row]))
    np.add.at(self._by_shard[:, 0], shards[errors == 0], 1)
    np.add.at(self._by_source, status['record_source'], 1)

  def _report(self, shard: int, error: int, key: str, detail: str) -> None:
    """One stdout line for the bad record just counted, or for its shard at 10, 100, ... of them, or none."""
    in_shard = int(self._by_shard[shard, 1:].sum())
    path = self.shard_paths[shard]
    if in_shard <= NAMED_PER_SHARD and self._named < MAX_NAMED:
      self._named += 1
      named = f' (key {key})' if key else ''
      print(f'bad record {self._bad_total}: {records.SKIP_REASONS[error - 1]} in {path}{named}'
            f'{": " + detail if detail else ""}; replaced by the next good record', flush=True)
      if self._named == MAX_NAMED:
        print(f'bad records: {MAX_NAMED} named so far; from here on a shard gets a line at 10, 100, 1000, ... of its '
              'bad records (all are counted in train/data/skipped/<reason>)', flush=True)
    elif is_power_of_ten(in_shard):
      reasons = ', '.join(f'{r} {n}' for r, n in zip(records.SKIP_REASONS, self._by_shard[shard, 1:]) if n)
      print(f'bad records: {in_shard} so far in {path} ({reasons}); {self._bad_total} in all (counted in '
            'train/data/skipped/<reason>)', flush=True)

  def _totals(self) -> tuple[np.ndarray, np.ndarray]:
    """(by shard [N, 1 + R], by source [S + 1]) summed over processes."""
    if jax.process_count() == 1:
      return self._by_shard, self._by_source
    from jax.experimental import multihost_utils
    flat = np.concatenate([self._by_shard.ravel(), self._by_source])
    flat = np.asarray(multihost_utils.process_allgather(flat)).sum(axis=0)
    return flat[:self._by_shard.size].reshape(self._by_shard.shape), flat[self._by_shard.size:]

  def metrics(self) -> dict[str, float]:
    """The data metrics, and the check: raises DataError naming the shards (or the whole data) whose share of bad
    records is above max_bad_fraction beyond chance (`bad_data_verdict`). Call it at the same steps on every process.

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
    failing, whole = bad_data_verdict(seen, bad, self.max_bad_fraction, self.alpha)
    if not len(failing) and not whole:
      return
    lines = []
    for shard in failing[:10]:
      reasons = ', '.join(f'{r} {n}' for r, n in zip(records.SKIP_REASONS, by_shard[shard, 1:]) if n)
      lines.append(f'  {self.shard_paths[shard]}: {bad[shard]} of {seen[shard]} records bad ({reasons})')
    more = f'\n  ... and {len(failing) - 10} more shards' if len(failing) > 10 else ''
    if whole:
      reasons = ', '.join(f'{r} {n}' for r, n in zip(records.SKIP_REASONS, by_shard[:, 1:].sum(axis=0)) if n)
      lines.insert(0, f'  all {len(seen)} shards together: {bad.sum()} of {seen.sum()} records bad ({reasons})')
    found = (f'{len(failing)} training shard(s)' + (' and the data as a whole' if whole else '') if len(failing)
             else 'the training data as a whole')
    raise DataError(
        f'{found} have more than data.max_bad_fraction={self.max_bad_fraction} bad records, beyond chance (data '
        f'within that limit stops a run with probability below data.bad_data_alpha={self.alpha}; bad records are '
        'replaced by good neighbours, but this many means the data is broken):\n'
        + '\n'.join(lines) + more + '\nRe-convert these shards (python -m vlp_jax.convert drops unusable '
        'records and counts them per reason), remove them from data.path, or raise data.max_bad_fraction.')
