"""Training the runs of lab/catalogue.py: each is `python -m vlp_jax.main --config=<its config>
--workdir=WORKDIR/<run>/seed<S> --config.seed=S --config.eval.every_steps=...` in a subprocess, exactly as a user runs
it, with only the runner's own flags beside the file (`runner_flags`: the seed, the eval interval, --steps for a
from-scratch run, the checkpoint of its `after` run, its teacher's). A finished run's row (final metrics, training
FLOPs from XLA, wall time, its command) is kept in the store, lab/results/methods/<run>/seed<S>.json, in git: a run
found there is not trained again, so an interrupted table resumes (an unfinished run resumes from its checkpoint).
"""
from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

from lab.catalogue import COLUMNS, ROOT, RUNS, SOURCE_SETS, TEACHER_SEED_OFFSET, load_config

NEVER = 10**9  # an eval interval no run reaches: the loop still evaluates at its last step
STORE = os.path.join(ROOT, 'lab', 'results', 'methods')  # <run>/seed<S>.json per finished run, kept in git


def of_budget(path: str, budget: int = 1) -> str:
  """A workdir or store of the runs of `budget`: `path` itself for the first, `path`_x<budget> for another ('' stays
  '': no store)."""
  return path if budget == 1 or not path else f'{path.rstrip(os.sep)}_x{budget}'


def of_rate(path: str, lr: float | None = None) -> str:
  """A workdir or store of the runs at learning rate `lr`: `path` itself without one, `path`_lr<lr> with one ('' stays
  '': no store), so that runs of different rates never share a workdir or a store."""
  return path if lr is None or not path else f'{path.rstrip(os.sep)}_lr{lr:g}'


def run_dir(workdir: str, name: str, seed: int) -> str:
  return os.path.join(workdir, name, f'seed{seed}')


@functools.lru_cache(maxsize=None)
def config_steps(name: str) -> int:
  """total_steps of run `name`'s config file."""
  return load_config(name).total_steps


def runner_flags(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0, budget: int = 1,
                 lr: float | None = None) -> dict:
  """What the runner sets beside run `name`'s config file ('a.b' -> value): the seed, the eval interval (0: at the
  end only), the learning rate `lr` (config.optim.lr; None keeps the config's), the checkpoint of the run it
  continues, --steps for a from-scratch run (else `budget` times its config's steps, when that is not 1), the
  teacher's checkpoint."""
  run = RUNS[name]
  out = {'seed': seed, 'eval.every_steps': eval_every or NEVER}
  if lr is not None:
    out['optim.lr'] = lr
  if run.after:  # a continue phase keeps its own (short) budget
    out['init.checkpoint'] = run_dir(workdir, run.after, seed)
  elif steps:
    out['total_steps'] = steps
  elif budget != 1:  # compute-matched controls and teachers scale too, so they stay matched
    out['total_steps'] = budget * config_steps(name)
  if run.teacher:
    out['objective.saco.teacher_checkpoint'] = run_dir(workdir, run.teacher, seed + TEACHER_SEED_OFFSET)
  return out


def command(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0, budget: int = 1,
            lr: float | None = None) -> list[str]:
  """The `python -m vlp_jax.main` command line of run `name` with `seed`; eval_every 0 evaluates at the end only."""
  return [sys.executable, '-m', 'vlp_jax.main', f'--config={RUNS[name].config}',
          f'--workdir={run_dir(workdir, name, seed)}',
          *(f'--config.{key}={value}'
            for key, value in runner_flags(workdir, name, seed, steps, eval_every, budget, lr).items())]


def run_config(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0, budget: int = 1,
               lr: float | None = None):
  """The config that command() trains: the file's, with the runner's flags."""
  config = load_config(name)
  for key, value in runner_flags(workdir, name, seed, steps, eval_every, budget, lr).items():
    *path, leaf = key.split('.')
    node = config
    for part in path:
      node = node[part]
    node[leaf] = value
  return config


def derived_metrics(metrics: dict) -> dict:
  """`metrics` ('<set>/<metric>' -> value, one evaluation's) with mean R@1 and RSUM per set and the within-source
  means added."""
  metrics = dict(metrics)
  for key in [k for k in metrics if k.endswith('/i2t_r1')]:
    prefix = key[:-len('i2t_r1')]
    metrics[f'{prefix}mean_r1'] = (metrics[key] + metrics[f'{prefix}t2i_r1']) / 2
    recalls = [f'{prefix}{d}_r{k}' for d in ('i2t', 't2i') for k in (1, 5, 10)]
    if all(r in metrics for r in recalls):  # ZeroVL's retrieval figure: the six recalls in percent, summed
      metrics[f'{prefix}rsum'] = 100 * sum(metrics[r] for r in recalls)
  for metric in ('mean_r1', 'affinity_consistency'):  # each source's own test set, averaged
    per_source = [metrics[f'{name}/{metric}'] for name in SOURCE_SETS if f'{name}/{metric}' in metrics]
    if len(per_source) == len(SOURCE_SETS):
      metrics[f'within_source/{metric}'] = sum(per_source) / len(per_source)
  return metrics


def read_records(workdir: str) -> list[dict]:
  """The records of `workdir`'s metrics.jsonl, in order."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()]


def step_flops_of(records: list[dict]) -> float | None:
  """XLA's count of one compiled train step (all devices): the last `perf/step_flops` logged, None without one."""
  return next((r['perf/step_flops'] for r in reversed(records) if 'perf/step_flops' in r), None)


def final_metrics(workdir: str) -> dict:
  """The last logged value of every eval metric ('<set>/<metric>'), plus mean R@1 and RSUM per set, the mean
  samples/s and the training FLOPs (XLA's count of one step times the steps)."""
  records = read_records(workdir)
  metrics = {}
  for record in records:
    metrics.update({k[len('eval/'):]: v for k, v in record.items() if k.startswith('eval/')})
  metrics = derived_metrics(metrics)
  rates = [r['perf/samples_per_sec'] for r in records if 'perf/samples_per_sec' in r]
  step_flops, steps = step_flops_of(records), max((int(r.get('step', 0)) for r in records), default=0)
  metrics['samples_per_sec'] = sum(rates) / max(len(rates), 1)
  # the training compute: XLA's count of one compiled step (all devices) times the steps trained (evaluation excluded)
  metrics['train_flops'] = step_flops * steps if step_flops else None
  return metrics


def evaluations(workdir: str) -> list[dict]:
  """Every evaluation of `workdir`'s run, by step: [{'step': S, 'train_flops': the run's own training FLOPs by then
  (XLA's count of one step times S; a teacher's are added where the curves are read, as the tables add them to the
  final row's), 'metrics': {'<set>/<metric>': value, with mean R@1, RSUM and the within-source means}}, ...], steps
  ascending. A step evaluated twice (a run resumed before its last evaluation) keeps its latest record."""
  records = read_records(workdir)
  step_flops, by_step = step_flops_of(records), {}
  for record in records:
    found = {k[len('eval/'):]: v for k, v in record.items() if k.startswith('eval/')}
    if found:
      by_step.setdefault(int(record['step']), {}).update(found)
  return [{'step': step, 'train_flops': step_flops * step if step_flops else None,
           'metrics': derived_metrics(metrics)} for step, metrics in sorted(by_step.items())]


def run_env(root: str) -> dict[str, str]:
  """The runs' environment: JAX's persistent compilation cache under the workdir (unless one is set already), so
  that every run after the first of a config loads its compiled step instead of compiling it (same programs, same
  results; about 9 s saved per tiny-model run)."""
  return {'JAX_COMPILATION_CACHE_DIR': os.path.join(root, 'jax_cache'), **os.environ}


def machine_name() -> str:
  """This machine as a row records it: '<cores>-core <CPU model>', '(AVX-512)' after it where the CPU has it."""
  model, flags = platform.processor() or platform.machine(), ''
  if os.path.exists('/proc/cpuinfo'):
    with open('/proc/cpuinfo') as f:
      fields = dict(line.split(':', 1) for line in f.read().split('\n\n')[0].splitlines() if ':' in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    model, flags = fields.get('model name', model), fields.get('flags', '')
  return f'{os.cpu_count()}-core {model}' + (' (AVX-512)' if 'avx512f' in flags.split() else '')


def code_commit() -> str:
  """The commit the runs train (ROOT's HEAD, '+' when its tracked files differ from it), or '' outside git."""
  try:
    head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(['git', 'diff', '--quiet', 'HEAD', '--', 'vlp_jax', 'configs'], cwd=ROOT).returncode
  except (OSError, subprocess.CalledProcessError):
    return ''
  return head + ('+' if dirty else '')


def stored_path(store: str, name: str, seed: int) -> str:
  return os.path.join(store, name, f'seed{seed}.json')


def stored_row(store: str, name: str, seed: int) -> dict | None:
  """The finished run's row kept in `store`, or None."""
  path = stored_path(store, name, seed)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_row(store: str, row: dict) -> None:
  """Keep a finished run's row in `store` (nothing when `store` is '')."""
  if not store:
    return
  path = stored_path(store, row['run'], row['seed'])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.tmp', 'w') as f:
    json.dump(row, f, indent=1, sort_keys=True)
  os.replace(path + '.tmp', path)


def latest_checkpoint_step(workdir: str) -> int:
  """The step of the latest finished checkpoint in `workdir`, -1 without one."""
  directory = os.path.join(workdir, 'checkpoints')
  steps = [int(entry) for entry in os.listdir(directory) if entry.isdigit()] if os.path.isdir(directory) else []
  return max(steps, default=-1)


def has_checkpoint(workdir: str) -> bool:
  """Whether `workdir` holds a checkpoint (a continued run or a SaCo mimic starts from its run's)."""
  return latest_checkpoint_step(workdir) >= 0


def checked_rate(row: dict, lr: float | None) -> dict:
  """`row`, unless it was trained at another learning rate than `lr` (None: any): a ValueError then, so that a store
  never mixes rates (a row without `learning_rate` was trained at its config's)."""
  if lr is not None and row.get('learning_rate') != lr:
    raise ValueError(f"{row['run']} seed {row['seed']}: the stored row was trained at learning rate "
                     f"{row.get('learning_rate', 'of its config')}, not {lr:g}; use a store of its own (of_rate)")
  return row


def train(root: str, name: str, seed: int, steps: int | None, eval_every: int = 0,
          store: str = '', jobs: int = 1, budget: int = 1, lr: float | None = None) -> dict:
  """Train run `name` with `seed` in a subprocess (resuming its workdir) unless `store` already holds its row;
  return the row, written to `store` (when given) and to the workdir's run_result.json. `lr` overrides the config's
  learning rate; the row records the rate it trained at, and with `eval_every` every evaluation (`evaluations`)."""
  if store and (row := stored_row(store, name, seed)) is not None:
    return checked_rate(row, lr)
  workdir = run_dir(root, name, seed)
  done = os.path.join(workdir, 'run_result.json')
  if os.path.exists(done):
    with open(done) as f:
      row = checked_rate(json.load(f), lr)
    write_row(store, row)
    return row
  start = latest_checkpoint_step(workdir)
  resumed = start >= 0  # its wall time then covers only the rest of the run
  config = run_config(root, name, seed, steps, budget=budget, lr=lr)
  # A workdir holding the final checkpoint only evaluates: that row says nothing of this code's training.
  evaluation_only = resumed and start >= config.total_steps
  began = time.time()
  argv = command(root, name, seed, steps, eval_every, budget, lr)
  result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=run_env(root))
  if result.returncode != 0:
    raise RuntimeError(f'{name} (seed {seed}) failed with exit code {result.returncode}:\n{result.stderr[-3000:]}')
  row = {'run': name, 'seed': seed, **final_metrics(workdir), 'wall_seconds': round(time.time() - began, 1),
         'config': RUNS[name].config, 'command': ' '.join(argv[1:]),
         'commit': code_commit(), 'machine': machine_name(), 'jobs': jobs, 'budget': budget,
         'learning_rate': config.optim.lr,
         **({'evaluations': evaluations(workdir)} if eval_every else {}),
         **({'resumed': True} if resumed else {}),
         **({'evaluation_only': True} if evaluation_only else {})}
  with open(done, 'w') as f:
    json.dump(row, f)
  write_row(store, row)
  return row


def remaining_seconds(remaining: list[str], rows: list[dict], jobs: int = 1) -> float | None:
  """The wall time of the runs `remaining` (a run name per seed still to train) at `jobs` at a time: each run's median
  wall over its `rows` trained from the start (not resumed), else the median over all such rows; None without any."""
  walls: dict[str, list[float]] = {}
  for row in rows:
    if not row.get('resumed') and not row.get('evaluation_only') and row.get('wall_seconds'):
      walls.setdefault(row['run'], []).append(row['wall_seconds'])
  if not walls:
    return None
  overall = statistics.median(w for run_walls in walls.values() for w in run_walls)
  return sum(statistics.median(walls[name]) if name in walls else overall for name in remaining) / max(jobs, 1)


def progress_line(row: dict, done: int, total: int, left: float | None) -> str:
  """'[done/total] run seed S: wall s, headline metric; the time left' for a run just trained."""
  metrics = RUNS[row['run']].metrics
  headline = (f', {dict(COLUMNS)[metrics[0]]} {row[metrics[0]]:.3f}'
              if metrics and isinstance(row.get(metrics[0]), (int, float)) else '')
  eta = ('' if done == total else '; time left unknown' if left is None
         else f'; about {left / 3600:.1f} h left' if left >= 3600 else f'; about {left / 60:.0f} min left')
  return f"[{done}/{total}] {row['run']} seed {row['seed']}: {row['wall_seconds']:.0f} s{headline}{eta}"


def planned_runs(names: list[str], seeds: list[int]) -> list[tuple[str, int]]:
  """The (run, seed) pairs a table of runs `names` over `seeds` trains, each SaCo mimic teacher (seed + 1000) first."""
  return list(dict.fromkeys(
      key for seed in seeds for name in names
      for key in ((RUNS[name].teacher, seed + TEACHER_SEED_OFFSET),) * bool(RUNS[name].teacher) + ((name, seed),)))


class Progress:
  """What an invocation has left to train (the `planned` runs `store` lacks), reported as each of them finishes."""

  def __init__(self, planned: list[tuple[str, int]], store: str, jobs: int = 1):
    self.stored = [row for key in planned if store and (row := stored_row(store, *key)) is not None]
    done = {(row['run'], row['seed']) for row in self.stored}
    self.todo = [key for key in planned if key not in done]
    self.planned, self.jobs, self.trained = planned, jobs, []
    self._lock = threading.Lock()

  def first_line(self) -> str:
    return (f'{len(self.planned) - len(self.todo)} of {len(self.planned)} runs stored; {len(self.todo)} to train, '
            f'{self.jobs} at a time.')

  def reported(self, row: dict) -> dict:
    """Print `row`'s progress line if it is one of the runs to train (a stored row passes silently); return it."""
    with self._lock:
      if (row['run'], row['seed']) not in self.todo:
        return row
      self.trained.append(row)
      done = {(r['run'], r['seed']) for r in self.trained}
      left = remaining_seconds([name for name, seed in self.todo if (name, seed) not in done],
                               self.stored + self.trained, self.jobs)
      print(progress_line(row, len(self.trained), len(self.todo), left), flush=True)
    return row


def train_with_prerequisites(root: str, name: str, seed: int, futures: dict, steps: int | None,
                             eval_every: int = 0, store: str = '', jobs: int = 1, budget: int = 1,
                             lr: float | None = None) -> dict:
  """`train`, after the checkpoints of run `name`'s AFTER (same seed) and TEACHER (seed + 1000) are there.

  `futures` maps (run, seed) to the submitted job of each; AFTER and TEACHER were submitted earlier, so are running
  or done (no deadlock with a FIFO pool). A stored run needs neither. A stored prerequisite whose workdir is gone
  (another machine, a cleaned /tmp) is trained again for its checkpoint, the same bit for bit; its stored row stays."""
  if store and (row := stored_row(store, name, seed)) is not None:
    return checked_rate(row, lr)
  run = RUNS[name]
  for needed, needed_seed in ((run.after, seed), (run.teacher, seed + TEACHER_SEED_OFFSET)):
    if needed:
      futures[(needed, needed_seed)].result()
      if not has_checkpoint(run_dir(root, needed, needed_seed)):
        train(root, needed, needed_seed, steps, eval_every, jobs=jobs, budget=budget, lr=lr)
  return train(root, name, seed, steps, eval_every, store, jobs, budget, lr)
