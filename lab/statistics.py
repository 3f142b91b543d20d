"""The statistics the tables read: means and sample deviations, paired differences seed by seed, Student-t intervals
of their mean and the verdict on them (docs/evidence.md), and which rows a table may read."""
from __future__ import annotations

import math
import statistics

import scipy.stats

from lab.catalogue import HELD_OUT_SEEDS

CONFIDENCE = 0.95  # of the paired t-interval a verdict is read on


def mean_std(values: list[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (0 for one value)."""
  mean = sum(values) / len(values)
  var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
  return mean, math.sqrt(var)


def pair_seeds(by_key: dict, name: str, control: str, seeds) -> list[int]:
  """The seeds of `seeds` where both run `name` and its `control` have a row (by_key: (run, seed) -> row)."""
  return [s for s in seeds if (name, s) in by_key and (control, s) in by_key]


def seed_differences(by_key: dict, name: str, other: str, seeds, key: str) -> list[float]:
  """Metric `key` of run `name` minus that of `other`, seed by seed over `seeds` (both runs' rows in by_key),
  leaving out the seeds where either row lacks the metric."""
  return [by_key[(name, s)][key] - by_key[(other, s)][key] for s in seeds
          if by_key[(name, s)].get(key) is not None and by_key[(other, s)].get(key) is not None]


def paired_interval(differences: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
  """(mean, low, high): the mean of the paired differences (method − control, one per seed) and its two-sided
  Student-t interval, mean ± t_{(1 + confidence) / 2, n - 1} * std / sqrt(n). Needs two differences or more."""
  if len(differences) < 2:
    raise ValueError(f'an interval needs at least 2 paired differences, got {len(differences)}')
  mean, std = mean_std(differences)
  half = float(scipy.stats.t.ppf((1 + confidence) / 2, len(differences) - 1)) * std / math.sqrt(len(differences))
  return mean, mean - half, mean + half


def verdict(differences: list[float], held_out: int | None = None, expected: int | None = None) -> str:
  """The verdict on a method against its control from the paired differences of every seed of one commit
  (docs/evidence.md): 'ahead' when the CONFIDENCE t-interval of their mean lies above zero, 'behind' when below,
  else 'not distinguishable at this budget' (never "no effect": the interval says how large an effect it leaves
  open). 'not run' without seeds; 'pending (k of n held-out seeds)' while fewer than the `expected` held-out seeds
  are in (`held_out` of them are), so that a verdict is never read before its held-out seeds."""
  if not differences:
    return 'not run'
  if expected is not None and (held_out or 0) < expected:
    return f'pending ({held_out or 0} of {expected} held-out seeds)'
  if len(differences) < 2:
    return 'one seed: no interval'
  _, low, high = paired_interval(differences)
  if low > 0:
    return 'ahead'
  if high < 0:
    return 'behind'
  return 'not distinguishable at this budget'


def interval_cell(differences: list[float], key: str) -> str:
  """'mean [low, high]' at the metric's precision (RSUM in percent), '-' with fewer than two differences."""
  if len(differences) < 2:
    return '-'
  digits = 1 if key.endswith('rsum') else 3
  mean, low, high = paired_interval(differences)
  return f'{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]'


def pair_verdict(every: list[float], held: int, commits: list[str], expected: int = len(HELD_OUT_SEEDS)) -> str:
  """`verdict` of a pair's paired differences over every seed, none when its runs come from several commits."""
  if len(commits) > 1:  # one commit's runs or none: code that changed between seeds is not one experiment
    return f'mixed commits ({", ".join(c or "unrecorded" for c in commits)}): rerun at one'
  return verdict(every, held, expected)


def tabulated(rows: list[dict]) -> tuple[list[dict], list[str]]:
  """The rows a table may read, and why each other one is left out: a row marked `evaluation_only` (its workdir
  already held the final checkpoint: it evaluated a run trained by other, perhaps older, code) is not a training
  run; retrain it from an empty workdir."""
  kept, refused = [], []
  for row in rows:
    if row.get('evaluation_only'):
      refused.append(f"{row['run']} seed {row['seed']}: evaluation only (its workdir held the final checkpoint); "
                     'retrain it from an empty workdir')
    else:
      kept.append(row)
  return kept, refused


def commits_of(rows: list[dict]) -> list[str]:
  """The distinct commits (`commit`, '' when unrecorded) that trained `rows`, sorted."""
  return sorted({str(r.get('commit') or '') for r in rows})


def timing_machine(rows: list[dict]) -> str | None:
  """The machine (a row's 'machine', None where a row names none) most of `rows` ran on: the only one whose wall
  times and speeds the tables compare, since a run's speed depends on the machine and not on its seed."""
  machines = [r.get('machine') for r in rows]
  return max(set(machines), key=machines.count) if machines else None


def mean_of(rows: list[dict], field: str, machine: str | None = None) -> float | None:
  """The mean of `field` over `rows`, or None. For wall times and speeds, the median of the runs trained alone and
  from the start on `machine` (`timing_machine`), leaving out those marked `contended` (other work shared the
  machine); the median keeps an unmarked one from moving the figure. None when no run is clean: a speed from a shared
  CPU is not reported."""
  clean = lambda r: (r.get('jobs') == 1 and not r.get('resumed') and not r.get('contended')  # noqa: E731
                     and r.get('machine') == machine)
  timed = field in ('wall_seconds', 'samples_per_sec')
  values = [r[field] for r in rows if r.get(field) is not None and (not timed or clean(r))]
  if timed and values:
    return statistics.median(values)
  return sum(values) / len(values) if values else None
