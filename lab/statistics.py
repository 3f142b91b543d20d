"""The statistics the tables read: means and sample deviations, paired differences seed by seed, Student-t intervals
of their mean and the verdict on them (docs/evidence.md), and which rows a table may read."""
from __future__ import annotations

import math
import statistics

import scipy.optimize
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
  """The verdict on a method against its control from the paired differences of its held-out seeds, of one commit
  (docs/evidence.md; the development seeds, which settings were chosen on, never enter it): 'ahead' when the
  CONFIDENCE t-interval of their mean lies above zero, 'behind' when below, else 'not distinguishable at this budget'
  (never "no effect": the interval says how large an effect it leaves open). 'not run' without seeds; 'pending (k of n
  held-out seeds)' while fewer than the `expected` held-out seeds are in (`held_out` of them are), so that a verdict
  is never read before its held-out seeds."""
  if not differences:
    return 'not run'
  if expected is not None and (held_out or 0) < expected:
    return f'pending ({held_out or 0} of {expected} held-out seeds)'
  if len(differences) < 2:
    return 'one seed: no interval'
  _, low, high = paired_interval(differences)
  return interval_verdict(low, high)


def interval_verdict(low: float, high: float, neither: str = 'not distinguishable at this budget') -> str:
  """'ahead' when the interval [low, high] lies above zero, 'behind' when below, else `neither`."""
  if low > 0:
    return 'ahead'
  if high < 0:
    return 'behind'
  return neither


def interval_cell(differences: list[float], key: str) -> str:
  """'mean [low, high]' at the metric's precision (RSUM in percent), '-' with fewer than two differences."""
  if len(differences) < 2:
    return '-'
  digits = 1 if key.endswith('rsum') else 3
  mean, low, high = paired_interval(differences)
  return f'{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]'


def pair_verdict(held_out: list[float], commits: list[str], expected: int = len(HELD_OUT_SEEDS)) -> str:
  """`verdict` of a pair's paired differences on its held-out seeds, none when its runs come from several
  commits."""
  if len(commits) > 1:  # one commit's runs or none: code that changed between seeds is not one experiment
    return f'mixed commits ({", ".join(c or "unrecorded" for c in commits)}): rerun at one'
  return verdict(held_out, len(held_out), expected)


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


# The learning-curve protocol (docs/evidence.md): "level" only inside a declared margin, by two one-sided tests at
# LEVEL_ALPHA; a metric (its name after the set) without a margin is never called level.
LEVEL_ALPHA = 0.05
LEVEL_MARGINS = {'zeroshot_top1': 0.03, 'mean_r1': 0.03, 'linear_probe_top1': 0.03, 'referring_probe_acc50': 0.03,
                 'referring_decoder_acc50': 0.03, 'rsum': 18.0}
POWER = 0.8  # of the smallest detectable effect


def log_interpolated(flops: list[float], values: list[float], at: float) -> float:
  """A curve's value at `at` FLOPs: `flops` (n,) ascending and `values` (n,) its evaluations; linear in log FLOPs
  between the two evaluations around `at` (an evaluation's own value at its FLOPs). A ValueError outside the curve:
  a curve is never extrapolated."""
  if not flops or not flops[0] <= at <= flops[-1]:
    raise ValueError(f'{at:.4g} FLOPs is outside the curve ({flops[0] if flops else "no evaluations"}'
                     f'{f" to {flops[-1]:.4g}" if flops else ""})')
  k = next(k for k in range(len(flops)) if flops[k] >= at)
  if flops[k] == at:
    return values[k]
  low, high = math.log(flops[k - 1]), math.log(flops[k])
  weight = (math.log(at) - low) / (high - low)
  return values[k - 1] + weight * (values[k] - values[k - 1])


def equal_flops_values(method: tuple[list[float], list[float]], control: tuple[list[float], list[float]]
                       ) -> tuple[float, float, float]:
  """(method's value, control's value, F) at equal FLOPs: each curve (flops (n,) ascending, values (n,)), F the
  smaller of the two runs' total FLOPs (their last evaluations'), the cheaper run read at its end and the other at F,
  interpolated (`log_interpolated`)."""
  budget = min(method[0][-1], control[0][-1])
  return log_interpolated(*method, budget), log_interpolated(*control, budget), budget


def paired_p_value(differences: list[float]) -> float:
  """The two-sided p-value of the paired t-test (mean of `differences` (n,), n >= 2, against zero, n - 1 degrees of
  freedom); 1 where every difference is zero, 0 where they are equal and not zero."""
  mean, std = mean_std(differences)
  if std == 0:
    return 1.0 if mean == 0 else 0.0
  t = mean / (std / math.sqrt(len(differences)))
  return float(2 * scipy.stats.t.sf(abs(t), len(differences) - 1))


def holm_adjusted(p_values: list[float]) -> list[float]:
  """Holm's step-down adjustment of a family of `p_values` (m,): sorted ascending, the k-th (from 0) becomes
  min(1, max over j <= k of (m - j) * p_(j)); returned in the input's order. A hypothesis is rejected at family-wise
  level a when its adjusted p-value is at most a."""
  order = sorted(range(len(p_values)), key=lambda k: p_values[k])
  adjusted, running = [0.0] * len(p_values), 0.0
  for rank, k in enumerate(order):
    running = max(running, min(1.0, (len(p_values) - rank) * p_values[k]))
    adjusted[k] = running
  return adjusted


def level_margin(key: str) -> float | None:
  """The declared equivalence margin of metric `key` ('<set>/<metric>'), None where none is declared."""
  return LEVEL_MARGINS.get(key.rsplit('/', 1)[-1])


def is_level(differences: list[float], margin: float | None, alpha: float = LEVEL_ALPHA) -> bool:
  """Two one-sided tests at `alpha` on the paired `differences` (n,), n >= 2: both reject exactly when the (1 - 2
  alpha) Student-t interval of their mean lies strictly inside (-margin, +margin). False without a margin."""
  if margin is None:
    return False
  _, low, high = paired_interval(differences, 1 - 2 * alpha)
  return -margin < low and high < margin


def t_test_power(effect: float, sd: float, n: int, alpha: float = 1 - CONFIDENCE) -> float:
  """The power of the two-sided paired t-test at `alpha` on n seeds when the true mean difference is `effect` and the
  differences' SD is `sd`: P(|T| > t_crit) for T noncentral t with n - 1 degrees of freedom and noncentrality
  effect * sqrt(n) / sd."""
  critical = scipy.stats.t.ppf(1 - alpha / 2, n - 1)
  noncentrality = effect * math.sqrt(n) / sd
  dist = scipy.stats.nct(n - 1, noncentrality)
  return float(dist.sf(critical) + dist.cdf(-critical))


def detectable_effect(sd: float, n: int, power: float = POWER, alpha: float = 1 - CONFIDENCE) -> float:
  """The smallest true mean difference the two-sided paired t-test at `alpha` on n seeds finds with `power`, for
  differences of SD `sd` > 0 (`t_test_power` solved for the effect, bracketed by doubling from one SD)."""
  if not sd > 0:
    raise ValueError(f'a detectable effect needs a positive SD, got {sd}')
  high = sd
  while t_test_power(high, sd, n, alpha) < power:
    high *= 2
  return float(scipy.optimize.brentq(lambda effect: t_test_power(effect, sd, n, alpha) - power, 0.0, high,
                                     xtol=1e-9 * sd))
