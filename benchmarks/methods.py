#!/usr/bin/env python
"""The methods table (benchmarks/RESULTS.md): train each method, its control, its mechanism ablations and, where it
costs much more, a compute-matched control on the embedded dataset under one budget, over the development seeds and
the held-out seeds, and tabulate the paired differences and the held-out verdict (docs/evidence.md).

python benchmarks/methods.py [--methods=table] [--seeds=0,1,2,11,12,13] [--jobs=1] [--workdir=/tmp/vlp_methods]
                             [--output=table.md] [--notrain] [--memory] [--budget=1] [--nocompute_controls]

The second budget (docs/evidence.md): `--methods=table_budget --budget=4 --seeds=11,12,13 --nocompute_controls`
trains the headline methods and their controls for 4x their configs' steps (compute-matched controls and teachers
scale with them, so they stay matched), in a workdir, a store and a block of RESULTS.md of their own (`_x4`).

--methods takes run names, groups of them (GROUPS below: 'table', 'table_saco', 'table_zerovl', ...) or 'all'; a
run brings its control, compute-matched control, continued run and teacher along, so `--methods=NAME` regenerates
NAME's row. Every run is a config file, and its name says which (one rule):

  run NAME = configs/NAME_shapes.py if that file exists (the shipped recipes and their controls: 'clip' is
             configs/clip_shapes.py, 'clip_continue' configs/clip_continue_shapes.py), else
             configs/experiments/NAME.py (controls and ablations: 'saco_mimic').

Every configs/*_shapes.py and configs/experiments/*.py is a run (a name in both places is an error). What the runner
needs besides the config it reads from the file's module-level constants (Python literals, read without importing the
file; a file's own, never inherited from the config it loads):

  LABEL            the row's heading in the tables (required)
  METRICS          the metrics its paper reports ('set/metric' keys of COLUMNS), declared before any run; the first
                   decides the verdict. Only runs with METRICS get a row in the headline table.
  CONTROL          the run it is compared with, seed by seed (default: BASELINE)
  COMPUTE_CONTROL  the control (a name, or a tuple of names) trained for as many FLOPs as this run, compared with the
                   same way
  BASELINE         the CLIP run of the same data and budget that the paired table also subtracts (default 'clip')
  AFTER            the run (same seed) whose final checkpoint initialises this one (continue pre-training)
  TEACHER          the run whose checkpoint, trained with seed + 1000, is SaCo's frozen mimic teacher

Each run is `python -m vlp_jax.main --config=<its file> --workdir=WORKDIR/<run>/seed<S> --config.seed=S
--config.eval.every_steps=...` in a subprocess, exactly as a user runs it, with only the runner's own flags beside the
file (runner_flags: the seed, the eval interval, --steps for a from-scratch run, the checkpoint of AFTER, the teacher
of TEACHER). A finished run's row (final metrics, training FLOPs from XLA, wall time, its command) is written to
benchmarks/results/methods/<run>/seed<S>.json, which is kept in git: a run found there is not trained again, so an
interrupted table resumes (an unfinished run resumes from its checkpoint in WORKDIR), and `--notrain` tabulates what
the store holds.

Prints how many runs are stored and to train, then a line per finished run (its wall time, its headline metric and
the time the rest should take, from the stored runs' median walls), then the Markdown tables (also written to
--output): the headline (method against control on the paper's metrics, development seeds mean ± std, held-out
differences and verdict, compute), every run's mean ± std, and every run against its controls seed by seed.
"""
from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import functools
import glob
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

import scipy.stats
from matplotlib.figure import Figure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

TEACHER_SEED_OFFSET = 1000
NEVER = 10**9  # an eval interval no run reaches: the loop still evaluates at its last step
METADATA = ('LABEL', 'BASELINE', 'CONTROL', 'COMPUTE_CONTROL', 'AFTER', 'TEACHER', 'METRICS')  # a config's constants
DEV_SEEDS = (0, 1, 2)  # the only seeds a choice of setting may look at (docs/evidence.md)
# Declared in docs/evidence.md on 2026-11-27, before any run of them: never used to choose anything. (4 and 5, the
# earlier held-out seeds, had been trained and reported before the rules; they are no longer held out.)
HELD_OUT_SEEDS = (11, 12, 13)
SECOND_BUDGET = 4  # the table's second budget, fixed before its runs (docs/evidence.md): 4x every run's steps
CONFIDENCE = 0.95  # of the paired t-interval a verdict is read on
RESULTS_MD = os.path.join(ROOT, 'benchmarks', 'RESULTS.md')
RESULTS_BEGIN = '<!-- methods table: written by benchmarks/methods.py --update_results -->'
RESULTS_END = '<!-- end of methods table -->'
STORE = os.path.join(ROOT, 'benchmarks', 'results', 'methods')  # <run>/seed<S>.json per finished run, kept in git


def verdict_plot_path(budget: int = 1) -> str:
  """benchmarks/results/methods_verdicts[_x<budget>].png, the plot of the verdicts RESULTS.md shows."""
  return os.path.join(ROOT, 'benchmarks', 'results', 'methods_verdicts' + (f'_x{budget}' if budget != 1 else '') + '.png')


def results_markers(budget: int = 1) -> tuple[str, str]:
  """The lines of RESULTS.md between which `--update_results` writes the tables of `budget`."""
  if budget == 1:
    return RESULTS_BEGIN, RESULTS_END
  return (f'<!-- methods table x{budget}: written by benchmarks/methods.py --update_results --budget={budget} -->',
          f'<!-- end of methods table x{budget} -->')


def of_budget(path: str, budget: int = 1) -> str:
  """A workdir or store of the runs of `budget`: `path` itself for the first, `path`_x<budget> for another ('' stays
  '': no store)."""
  return path if budget == 1 or not path else f'{path.rstrip(os.sep)}_x{budget}'


# The columns: (metric key as 'eval set/metric', heading). Mean R@1 averages I2T and T2I.
COLUMNS = (
    ('synthetic/zeroshot_top1', 'zero-shot top-1'),
    ('synthetic/mean_r1', 'mean R@1, short captions'),
    ('synthetic/rsum', 'RSUM, short captions'),
    ('synthetic_long/mean_r1', 'mean R@1, long captions'),
    ('within_source/mean_r1', 'mean R@1 within a source'),
    ('synthetic/linear_probe_top1', 'linear probe top-1'),
    ('synthetic/affinity_consistency', 'affinity consistency'),
    ('within_source/affinity_consistency', 'affinity consistency within a source'),
    ('synthetic/compositional_acc', 'compositional acc.'),
    ('synthetic/segmentation_miou', 'segmentation mIoU'),
    ('synthetic/referring_probe_acc50', 'referring Acc@0.5, frozen-feature probe'),
    ('synthetic/referring_decoder_acc50', 'referring Acc@0.5, decoder'),
)


@dataclasses.dataclass(frozen=True)
class Run:
  """One row of the table: a config file (relative to the repository root) and what the runner reads beside it.

  after: the run (same seed) whose final checkpoint initialises this one (continue pre-training).
  teacher: the run whose checkpoint, trained with seed + TEACHER_SEED_OFFSET, is SaCo's frozen mimic teacher.
  metrics: the metric keys ('set/metric', COLUMNS) its paper reports, declared before any run; the first decides the
    verdict against the control on the held-out seeds (docs/evidence.md). Empty for controls and teachers.
  """
  config: str
  label: str
  after: str | None = None
  teacher: str | None = None
  control: str | None = None  # the run it is compared with, seed by seed, in the paired table (default: baseline)
  baseline: str = 'clip'  # the CLIP of the same data and budget, which every paired row also subtracts
  metrics: tuple[str, ...] = ()
  # the controls trained for as many FLOPs as this run (docs/evidence.md, rule 1)
  compute_controls: tuple[str, ...] = ()


def config_path(name: str, root: str = ROOT) -> str:
  """The config file of run `name`, relative to `root`: configs/NAME_shapes.py if it exists, else
  configs/experiments/NAME.py."""
  shipped = os.path.join('configs', f'{name}_shapes.py')
  experiment = os.path.join('configs', 'experiments', f'{name}.py')
  return shipped if os.path.exists(os.path.join(root, shipped)) else experiment


def read_run(path: str, root: str = ROOT) -> Run:
  """The Run of config file `path` (relative to `root`) from its module-level LABEL, BASELINE, CONTROL, AFTER and
  TEACHER, which must be literals."""
  with open(os.path.join(root, path)) as f:
    tree = ast.parse(f.read(), path)
  found = {}
  for node in tree.body:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    for target in targets:
      if isinstance(target, ast.Name) and target.id in METADATA:
        try:
          found[target.id] = ast.literal_eval(node.value)
        except ValueError:
          raise ValueError(f'{path}: {target.id} must be a literal (benchmarks/methods.py reads it without importing '
                           'the file)') from None
  if not isinstance(found.get('LABEL'), str):
    raise ValueError(f"{path}: no LABEL = '...' (the run's heading in the tables of benchmarks/methods.py)")
  if 'COMPUTE_CONTROL' in found:  # one name or a tuple of them
    value = found.pop('COMPUTE_CONTROL')
    found['COMPUTE_CONTROLS'] = (value,) if isinstance(value, str) else value
    if not (isinstance(value, (str, tuple)) and all(isinstance(v, str) for v in found['COMPUTE_CONTROLS'])):
      raise ValueError(f'{path}: COMPUTE_CONTROL must be a run name or a tuple of them, got {value!r}')
  if 'METRICS' in found:
    unknown = [m for m in found['METRICS'] if m not in dict(COLUMNS)]
    if unknown or not isinstance(found['METRICS'], tuple):
      raise ValueError(f'{path}: METRICS must be a tuple of {[key for key, _ in COLUMNS]}; unknown: {unknown}')
  return Run(path, **{key.lower(): value for key, value in found.items()})


def discover(root: str = ROOT) -> dict[str, Run]:
  """Every run: configs/*_shapes.py, then configs/experiments/*.py, by name. Raises ValueError where a name is in
  both places or a run's BASELINE, CONTROL, AFTER or TEACHER names no run."""
  shipped = sorted(os.path.basename(p)[:-len('_shapes.py')]
                   for p in glob.glob(os.path.join(root, 'configs', '*_shapes.py')))
  experiments = sorted(os.path.basename(p)[:-len('.py')]
                       for p in glob.glob(os.path.join(root, 'configs', 'experiments', '*.py')))
  both = sorted(set(shipped) & set(experiments))
  if both:
    raise ValueError(f'runs {both} are both configs/<name>_shapes.py and configs/experiments/<name>.py: rename one')
  runs = {name: read_run(config_path(name, root), root) for name in shipped + experiments}
  for name, run in runs.items():
    for field in ('baseline', 'control', 'compute_controls', 'after', 'teacher'):
      value = getattr(run, field)
      for other in value if isinstance(value, tuple) else (value,):
        if other is not None and other not in runs:
          raise ValueError(f"{run.config}: {field.upper().rstrip('S')} names '{other}', which is not a run; runs: "
                           f'{sorted(runs)}')
  return runs


RUNS: dict[str, Run] = discover()

GROUPS = {
    # each method with its control, its mechanism ablations and, where it costs much more, a compute-matched control
    'table_saco': ('clip', 'saco', 'saco_no_ramp', 'saco_masking', 'saco_mimic', 'saco_mimic_only', 'saco_constant',
                   'clip_mimic_compute', 'clip_continue', 'saco_continue'),
    'table_slip': ('clip', 'slip', 'clip_slip_compute'),
    'table_cosmos': ('clip_text_pool', 'clip_text_pool_augment_ema', 'cosmos', 'cosmos_no_distill',
                     'clip_text_pool_compute', 'clip_cosmos_compute'),
    'table_zerovl': ('clip_zerovl_temperature', 'zerovl', 'zerovl_mixup', 'zerovl_single_source', 'zerovl_text_augment'),
    'table_siglip2': ('clip_regions', 'siglip_regions', 'siglip2', 'siglip2_decoder_only', 'siglip2_distill_only',
                      'siglip2_masked_only', 'siglip2_captions_only', 'siglip2_shuffled_boxes', 'siglip_compute'),
}
# speed levers of the pod configs, each against CLIP at equal steps (not part of the methods table)
GROUPS['speed'] = ('clip', 'clip_bf16', 'clip_patch_dropout')
# the second budget's rows (docs/evidence.md): each headline method with its control
GROUPS['table_budget'] = ('clip', 'saco', 'slip', 'cosmos', 'zerovl')
GROUPS['table'] = tuple(dict.fromkeys(name for group in ('saco', 'slip', 'cosmos', 'zerovl', 'siglip2')
                                        for name in GROUPS[f'table_{group}']))

SOURCE_SETS = ('synthetic_studio', 'synthetic_web', 'synthetic_sketch')  # averaged into 'within_source'
FLAGS = flags.FLAGS


def define_flags() -> None:
  """Only when run as a script, so that tests can import the functions beside vlp_jax.main (which has --workdir)."""
  flags.DEFINE_list('methods', ['table'], f'Runs or groups: {sorted(RUNS)}; groups {sorted(GROUPS)}; all.')
  flags.DEFINE_list('seeds', [str(s) for s in DEV_SEEDS + HELD_OUT_SEEDS],
                    'Seeds (config.seed) to run every method with: the development seeds, then the held-out ones.')
  flags.DEFINE_bool('train', True, 'Train the runs the store lacks; --notrain only tabulates the stored ones.')
  flags.DEFINE_string('store', STORE, "Where each finished run's row is kept ('' keeps none).")
  flags.DEFINE_integer('steps', None, "Override total_steps of every from-scratch run (default: the configs').")
  flags.DEFINE_integer('jobs', 1, 'Runs trained at once. Each uses every core, but compiles, evaluations and the input '
                       'pipeline leave some idle: two at once finish a set of runs about 15% sooner on a 2-core CPU, '
                       'but then no wall time is clean, and the tables average only those of runs trained alone.')
  flags.DEFINE_string('workdir', '/tmp/vlp_methods', 'Where the runs write (a rerun skips finished runs).')
  flags.DEFINE_string('output', '', 'Also write the Markdown table to this file.')
  flags.DEFINE_bool('update_results', False, 'Also write the tables into benchmarks/RESULTS.md, between its '
                    f'{RESULTS_BEGIN!r} and {RESULTS_END!r} lines (the text outside them is kept), and draw '
                    'the verdicts into benchmarks/results/methods_verdicts.png.')
  flags.DEFINE_bool('memory', False, "Add each method's compiled train-step memory relative to CLIP.")
  flags.DEFINE_integer('eval_every', 0, 'Evaluate every N steps as well as at the end (0: at the end only, which '
                       'the table reads; the configs evaluate every 100 steps for their curves).')
  flags.DEFINE_integer('budget', 1, f'Train every from-scratch run for this many times its steps ({SECOND_BUDGET}: the '
                       "table's second budget), in --workdir_x<budget>, --store_x<budget> and its own block of "
                       'RESULTS.md.', lower_bound=1)
  flags.DEFINE_list('compare', [], 'Pairs run:other (e.g. cosmos:cosmos_no_distill): print, instead of the tables, '
                    "each pair's mean paired difference over their shared seeds with its t-interval, for every "
                    'column. For ablations that are not a headline pair: a description, not a verdict (its pair was '
                    'not declared before the runs).')
  flags.DEFINE_bool('compute_controls', True, "Bring each run's compute-matched controls along (the second budget "
                    'runs without them).')


def expand(names: list[str], compute_controls: bool = True) -> list[str]:
  """Run and group names -> run names, in order, without repeats, each after the runs it starts from or is compared
  with (its compute-matched controls too, unless `compute_controls` is false)."""
  out: list[str] = []

  def add(name: str) -> None:
    if name in out:
      return
    if name not in RUNS:
      raise ValueError(f"--methods has '{name}'; valid runs: {sorted(RUNS)}, groups: {sorted(GROUPS)}, 'all'")
    run = RUNS[name]
    # (a TEACHER is trained with seed + TEACHER_SEED_OFFSET by main, not as a row of the requested seeds)
    for needed in (run.after, run.baseline, run.control, *(run.compute_controls if compute_controls else ())):
      if needed and needed != name:
        add(needed)
    out.append(name)

  for name in names:
    for run in (RUNS if name == 'all' else GROUPS.get(name, (name,))):
      add(run)
  return out


def run_dir(workdir: str, name: str, seed: int) -> str:
  return os.path.join(workdir, name, f'seed{seed}')


@functools.lru_cache(maxsize=None)
def config_steps(name: str) -> int:
  """total_steps of run `name`'s config file."""
  from vlp_jax.config import from_file
  return from_file(os.path.join(ROOT, RUNS[name].config)).total_steps


def runner_flags(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0, budget: int = 1) -> dict:
  """What the runner sets beside run `name`'s config file ('a.b' -> value): the seed, the eval interval (0: at the
  end only), the checkpoint of the run it continues, --steps for a from-scratch run (else `budget` times its
  config's steps, when that is not 1), the teacher's checkpoint."""
  run = RUNS[name]
  out = {'seed': seed, 'eval.every_steps': eval_every or NEVER}
  if run.after:  # a continue phase keeps its own (short) budget
    out['init.checkpoint'] = run_dir(workdir, run.after, seed)
  elif steps:
    out['total_steps'] = steps
  elif budget != 1:  # compute-matched controls and teachers scale too, so they stay matched
    out['total_steps'] = budget * config_steps(name)
  if run.teacher:
    out['objective.saco.teacher_checkpoint'] = run_dir(workdir, run.teacher, seed + TEACHER_SEED_OFFSET)
  return out


def command(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0, budget: int = 1) -> list[str]:
  """The `python -m vlp_jax.main` command line of run `name` with `seed`; eval_every 0 evaluates at the end only."""
  return [sys.executable, '-m', 'vlp_jax.main', f'--config={RUNS[name].config}',
          f'--workdir={run_dir(workdir, name, seed)}',
          *(f'--config.{key}={value}'
            for key, value in runner_flags(workdir, name, seed, steps, eval_every, budget).items())]


def run_config(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0, budget: int = 1):
  """The config that command() trains: the file's, with the runner's flags."""
  from vlp_jax.config import from_file
  config = from_file(os.path.join(ROOT, RUNS[name].config))
  for key, value in runner_flags(workdir, name, seed, steps, eval_every, budget).items():
    *path, leaf = key.split('.')
    node = config
    for part in path:
      node = node[part]
    node[leaf] = value
  return config


def final_metrics(workdir: str) -> dict:
  """The last logged value of every eval metric ('<set>/<metric>'), plus mean R@1 and RSUM per set, the mean
  samples/s and the training FLOPs (XLA's count of one step times the steps)."""
  metrics, rates, step_flops, steps = {}, [], None, 0
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    for line in f:
      record = json.loads(line)
      metrics.update({k[len('eval/'):]: v for k, v in record.items() if k.startswith('eval/')})
      if 'perf/samples_per_sec' in record:
        rates.append(record['perf/samples_per_sec'])
      step_flops = record.get('perf/step_flops', step_flops)
      steps = max(steps, int(record.get('step', 0)))
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
  metrics['samples_per_sec'] = sum(rates) / max(len(rates), 1)
  # the training compute: XLA's count of one compiled step (all devices) times the steps trained (evaluation excluded)
  metrics['train_flops'] = step_flops * steps if step_flops else None
  return metrics


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


def train(root: str, name: str, seed: int, steps: int | None, eval_every: int = 0,
          store: str = '', jobs: int = 1, budget: int = 1) -> dict:
  """Train run `name` with `seed` in a subprocess (resuming its workdir) unless `store` already holds its row;
  return the row, written to `store` (when given) and to the workdir's run_result.json."""
  if store and (row := stored_row(store, name, seed)) is not None:
    return row
  workdir = run_dir(root, name, seed)
  done = os.path.join(workdir, 'run_result.json')
  if os.path.exists(done):
    with open(done) as f:
      row = json.load(f)
    write_row(store, row)
    return row
  start = latest_checkpoint_step(workdir)
  resumed = start >= 0  # its wall time then covers only the rest of the run
  # A workdir holding the final checkpoint only evaluates: that row says nothing of this code's training.
  evaluation_only = resumed and start >= run_config(root, name, seed, steps, budget=budget).total_steps
  began = time.time()
  result = subprocess.run(command(root, name, seed, steps, eval_every, budget), cwd=ROOT, capture_output=True,
                          text=True, env=run_env(root))
  if result.returncode != 0:
    raise RuntimeError(f'{name} (seed {seed}) failed with exit code {result.returncode}:\n{result.stderr[-3000:]}')
  row = {'run': name, 'seed': seed, **final_metrics(workdir), 'wall_seconds': round(time.time() - began, 1),
         'config': RUNS[name].config, 'command': ' '.join(command(root, name, seed, steps, eval_every, budget)[1:]),
         'commit': code_commit(), 'machine': machine_name(), 'jobs': jobs, 'budget': budget,
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
                             eval_every: int = 0, store: str = '', jobs: int = 1, budget: int = 1) -> dict:
  """`train`, after the checkpoints of run `name`'s AFTER (same seed) and TEACHER (seed + 1000) are there.

  `futures` maps (run, seed) to the submitted job of each; AFTER and TEACHER were submitted earlier, so are running
  or done (no deadlock with a FIFO pool). A stored run needs neither. A stored prerequisite whose workdir is gone
  (another machine, a cleaned /tmp) is trained again for its checkpoint, the same bit for bit; its stored row stays."""
  if store and (row := stored_row(store, name, seed)) is not None:
    return row
  run = RUNS[name]
  for needed, needed_seed in ((run.after, seed), (run.teacher, seed + TEACHER_SEED_OFFSET)):
    if needed:
      futures[(needed, needed_seed)].result()
      if not has_checkpoint(run_dir(root, needed, needed_seed)):
        train(root, needed, needed_seed, steps, eval_every, jobs=jobs, budget=budget)
  return train(root, name, seed, steps, eval_every, store, jobs, budget)


def latest_checkpoint_step(workdir: str) -> int:
  """The step of the latest finished checkpoint in `workdir`, -1 without one."""
  directory = os.path.join(workdir, 'checkpoints')
  steps = [int(entry) for entry in os.listdir(directory) if entry.isdigit()] if os.path.isdir(directory) else []
  return max(steps, default=-1)


def has_checkpoint(workdir: str) -> bool:
  """Whether `workdir` holds a checkpoint (a continued run or a SaCo mimic starts from its run's)."""
  return latest_checkpoint_step(workdir) >= 0


def write_row(store: str, row: dict) -> None:
  """Keep a finished run's row in `store` (nothing when `store` is '')."""
  if not store:
    return
  path = stored_path(store, row['run'], row['seed'])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.tmp', 'w') as f:
    json.dump(row, f, indent=1, sort_keys=True)
  os.replace(path + '.tmp', path)


def mean_std(values: list[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (0 for one value)."""
  mean = sum(values) / len(values)
  var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
  return mean, math.sqrt(var)


def table(rows: list[dict], names: list[str], memory: dict[str, float]) -> str:
  """Markdown: one line per run name, mean +- std over its seeds for every column, wall time, step time vs CLIP."""
  by_name = {name: [r for r in rows if r['run'] == name] for name in names}
  base = by_name.get('clip') or next(iter(by_name.values()))
  machine = timing_machine(rows)
  base_rate = _mean_of(base, 'samples_per_sec', machine)
  heads = [h for _, h in COLUMNS] + ['wall per run (median)', 'step time vs CLIP'] + (['step memory vs CLIP'] if memory else [])
  lines = ['| run | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name, runs in by_name.items():
    if not runs or name == 'clip_teacher':
      continue
    cells = []
    for key, _ in COLUMNS:
      values = [r[key] for r in runs if r.get(key) is not None]
      digits = 1 if key.endswith('rsum') else 3  # RSUM is in percent
      cells.append(f'{mean_std(values)[0]:.{digits}f} ± {mean_std(values)[1]:.{digits}f}' if values else '-')
    rate = _mean_of(runs, 'samples_per_sec', machine)
    wall = _mean_of(runs, 'wall_seconds', machine)
    cells += [f'{wall:.0f} s' if wall else '-', f'{base_rate / rate:.2f}x' if rate and base_rate else '-']
    if memory:
      cells.append(f"{memory[name] / memory.get('clip', memory[name]):.2f}x" if name in memory else '-')
    seeds = ','.join(str(r['seed']) for r in runs)
    lines.append(f'| {RUNS[name].label} (`{name}`, seeds {seeds}) | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def pair_seeds(by_key: dict, name: str, control: str, seeds) -> list[int]:
  """The seeds of `seeds` where both run `name` and its `control` have a row (by_key: (run, seed) -> row)."""
  return [s for s in seeds if (name, s) in by_key and (control, s) in by_key]


def seed_differences(by_key: dict, name: str, other: str, seeds, key: str) -> list[float]:
  """Metric `key` of run `name` minus that of `other`, seed by seed over `seeds` (both runs' rows in by_key),
  leaving out the seeds where either row lacks the metric."""
  return [by_key[(name, s)][key] - by_key[(other, s)][key] for s in seeds
          if by_key[(name, s)].get(key) is not None and by_key[(other, s)].get(key) is not None]


def paired_table(rows: list[dict], names: list[str]) -> str:
  """Markdown: each run minus its baseline CLIP (and minus its own control, where that is another run), seed by seed.

  Seeds move every metric a lot at this scale (CLIP's zero-shot spans 0.20-0.33 over seeds 0-2), and a method
  trained with the same seed shares its initialisation and data order with its control, so the per-seed difference
  is the sharper comparison. Cells: mean ± std of the difference, then how many seeds the run is ahead on.
  """
  by_key = {(r['run'], r['seed']): r for r in rows}
  all_seeds = sorted({r['seed'] for r in rows})
  heads = [h for _, h in COLUMNS]
  lines = ['| run − control | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name in names:
    spec = RUNS[name]
    if name in ('clip', 'clip_teacher') or not any(r['run'] == name for r in rows):
      continue
    for control in dict.fromkeys((spec.baseline, spec.control or spec.baseline, *spec.compute_controls)):
      if control is None or control == name:
        continue
      seeds = pair_seeds(by_key, name, control, all_seeds)
      if not seeds:
        continue
      cells = []
      for key, _ in COLUMNS:
        diffs = seed_differences(by_key, name, control, seeds, key)
        digits = 1 if key.endswith('rsum') else 3
        mean, std = mean_std(diffs) if diffs else (0.0, 0.0)
        ahead = sum(d > 0 for d in diffs)
        cells.append(f'{mean:+.{digits}f} ± {std:.{digits}f} ({ahead}/{len(diffs)})' if diffs else '-')
      lines.append(f'| `{name}` − `{control}` (seeds {",".join(map(str, seeds))}) | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


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


def parse_pairs(specs: list[str]) -> list[tuple[str, str]]:
  """'run:other' strings -> (run, other), each a known run; a clear error naming the bad entry otherwise."""
  pairs = []
  for spec in specs:
    parts = spec.split(':')
    if len(parts) != 2 or not all(parts):
      raise ValueError(f'--compare: {spec!r} is not run:other')
    unknown = [p for p in parts if p not in RUNS]
    if unknown:
      raise ValueError(f'--compare: unknown run {unknown[0]!r} in {spec!r}; runs: {sorted(RUNS)}')
    pairs.append((parts[0], parts[1]))
  return pairs


def comparison_table(rows: list[dict], pairs: list[tuple[str, str]], columns=COLUMNS) -> str:
  """Markdown: per pair (run, other) and column ((key, heading) pairs, the table's COLUMNS by default), the mean of
  run − other over the seeds both have, with its CONFIDENCE t-interval (`interval_cell`) and how many seeds run is
  ahead on; '-' below two seeds."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  all_seeds = sorted({r['seed'] for r in rows})
  heads = [h for _, h in columns]
  lines = ['| run − other (seeds) | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name, other in pairs:
    seeds = pair_seeds(by_key, name, other, all_seeds)
    cells = []
    for key, _ in columns:
      diffs = seed_differences(by_key, name, other, seeds, key)
      cell = interval_cell(diffs, key)
      cells.append(f'{cell} ({sum(d > 0 for d in diffs)}/{len(diffs)})' if cell != '-' else '-')
    lines.append(f'| `{name}` − `{other}` ({",".join(map(str, seeds)) or "no shared seeds"}) | '
                 + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


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


def _cell(values: list[float], key: str, signed: bool = False) -> str:
  """mean ± std of `values` at the metric's precision (RSUM is in percent); '-' without values."""
  if not values:
    return '-'
  digits = 1 if key.endswith('rsum') else 3
  mean, std = mean_std(values)
  return f'{mean:{"+" if signed else ""}.{digits}f} ± {std:.{digits}f}'


def timing_machine(rows: list[dict]) -> str | None:
  """The machine (a row's 'machine', None where a row names none) most of `rows` ran on: the only one whose wall
  times and speeds the tables compare, since a run's speed depends on the machine and not on its seed."""
  machines = [r.get('machine') for r in rows]
  return max(set(machines), key=machines.count) if machines else None


def _mean_of(rows: list[dict], field: str, machine: str | None = None) -> float | None:
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


def headline_pairs(names: list[str]) -> list[tuple[str, str]]:
  """(method, control) for each run of `names` with METRICS: its CONTROL (else BASELINE), then each COMPUTE_CONTROL."""
  return [(n, c) for n in names for c in dict.fromkeys((RUNS[n].control or RUNS[n].baseline, *RUNS[n].compute_controls))
          if c and c != n and RUNS[n].metrics]


def pair_verdict(every: list[float], held: int, commits: list[str], expected: int = len(HELD_OUT_SEEDS)) -> str:
  """`verdict` of a pair's paired differences over every seed, none when its runs come from several commits."""
  if len(commits) > 1:  # one commit's runs or none: code that changed between seeds is not one experiment
    return f'mixed commits ({", ".join(c or "unrecorded" for c in commits)}): rerun at one'
  return verdict(every, held, expected)


def verdict_entries(rows: list[dict], names: list[str], dev_seeds=DEV_SEEDS, held_out_seeds=HELD_OUT_SEEDS
                    ) -> list[dict]:
  """Per headline pair (`headline_pairs`) with seeds of both: its headline metric's paired differences (method −
  control) on the development and held-out seeds and its verdict, as `verdict_figure` draws them."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  entries = []
  for name, control in headline_pairs(names):
    key = RUNS[name].metrics[0]
    dev, held = pair_seeds(by_key, name, control, dev_seeds), pair_seeds(by_key, name, control, held_out_seeds)
    if not dev + held:
      continue
    diff = {s: by_key[(name, s)][key] - by_key[(control, s)][key] for s in dev + held}
    every = list(diff.values())
    commits = commits_of([by_key[(r, s)] for s in dev + held for r in (name, control)])
    entries.append({'method': name, 'control': control, 'metric': dict(COLUMNS)[key],
                    'dev': [diff[s] for s in dev], 'held_out': [diff[s] for s in held],
                    'interval': paired_interval(every) if len(every) > 1 else None,
                    'verdict': pair_verdict(every, len(held), commits, len(held_out_seeds))})
  return entries


VERDICT_COLOURS = {'ahead': 'tab:green', 'behind': 'tab:red', 'not distinguishable at this budget': 'tab:gray'}


def verdict_figure(entries: list[dict], title: str = ''):
  """A matplotlib Figure: a panel per headline metric, a line per method − control pair with the 95% t-interval of
  the mean paired difference (coloured by verdict; pending ones pale), the development seeds' differences as open
  circles and the held-out seeds' as filled triangles, and zero marked."""
  metrics = list(dict.fromkeys(e['metric'] for e in entries))
  counts = [sum(e['metric'] == m for e in entries) for m in metrics]
  fig = Figure(figsize=(9, 0.9 + 0.42 * sum(counts) + 0.5 * len(metrics)))
  axes = fig.subplots(len(metrics), 1, squeeze=False, gridspec_kw={'height_ratios': counts})[:, 0]
  for ax, metric in zip(axes, metrics):
    mine = [e for e in entries if e['metric'] == metric][::-1]  # the first at the top
    for y, e in enumerate(mine):
      colour = VERDICT_COLOURS.get(e['verdict'], 'tab:blue')
      pale = e['verdict'] not in VERDICT_COLOURS
      if e['interval']:
        mean, low, high = e['interval']
        ax.plot([low, high], [y, y], color=colour, alpha=0.45 if pale else 1.0, linewidth=2.5)
        ax.plot([mean], [y], 'o', color=colour, markersize=6)
      ax.plot(e['dev'], [y + 0.18] * len(e['dev']), 'o', mfc='none', mec='black', markersize=5)
      ax.plot(e['held_out'], [y - 0.18] * len(e['held_out']), '^', color='black', markersize=5)
    ax.axvline(0.0, color='black', linewidth=0.8)
    ax.set_yticks(range(len(mine)), [f"{e['method']} − {e['control']}: {e['verdict']}" for e in mine], fontsize=8)
    ax.set_ylim(-0.7, len(mine) - 0.3)
    ax.set_xlabel(f'{metric}: method − control (95% t-interval over seeds; o development, ▲ held out)', fontsize=8)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  return fig


def headline_table(rows: list[dict], names: list[str], dev_seeds=DEV_SEEDS, held_out_seeds=HELD_OUT_SEEDS) -> str:
  """Markdown: per method (a run with METRICS) and each metric its paper reports, the method and its control on the
  development seeds (mean ± std), their paired difference there, the mean paired difference over every seed with
  its t-interval, the difference on each held-out seed and the verdict (`verdict`; rows of several commits get
  none), then the training compute (XLA's FLOPs; a TEACHER's training counted as the method's, '-'
  without its rows) and wall time of each side. A run with COMPUTE_CONTROLs gets a block against each."""
  by_key = {(r['run'], r['seed']): r for r in rows}
  machine = timing_machine(rows)
  heads = ['method', 'control', "paper's metric", f'method, seeds {",".join(map(str, dev_seeds))}', 'control',
           'method − control, development seeds',
           f'method − control, every seed: mean [{CONFIDENCE:.0%} t-interval]',
           f'held out ({",".join(map(str, held_out_seeds))}): method − control', 'verdict',
           'training TFLOP, method / control', 'wall per run (median), method / control', 'regenerate']
  lines = ['| ' + ' | '.join(heads) + ' |', '|---' * len(heads) + '|']
  for name, control in headline_pairs(names):
    run = RUNS[name]
    dev, held = pair_seeds(by_key, name, control, dev_seeds), pair_seeds(by_key, name, control, held_out_seeds)
    mine, theirs = [by_key[(name, s)] for s in dev + held], [by_key[(control, s)] for s in dev + held]
    commits = commits_of(mine + theirs)
    for k, key in enumerate(run.metrics):
      diff = lambda s: by_key[(name, s)][key] - by_key[(control, s)][key]  # noqa: E731
      held_cells = ', '.join(f'{diff(s):+.{1 if key.endswith("rsum") else 3}f}' for s in held) or '-'
      every = [diff(s) for s in dev + held]
      judged = pair_verdict(every, len(held), commits, len(held_out_seeds))
      cells = [f'{run.label} (`{name}`)' if k == 0 else '', f'`{control}`' if k == 0 else '', dict(COLUMNS)[key],
               _cell([by_key[(name, s)][key] for s in dev], key), _cell([by_key[(control, s)][key] for s in dev], key),
               _cell([diff(s) for s in dev], key, signed=True) + f' ({sum(diff(s) > 0 for s in dev)}/{len(dev)})',
               interval_cell(every, key), held_cells, ('**{}**' if k == 0 else '{}').format(judged)]
      if k == 0:
        flops = [_mean_of(side, 'train_flops') for side in (mine, theirs)]
        if run.teacher and flops[0]:  # the teacher's training is part of the method's compute
          teachers = [by_key[(run.teacher, s + TEACHER_SEED_OFFSET)] for s in dev + held
                      if (run.teacher, s + TEACHER_SEED_OFFSET) in by_key]
          flops[0] = flops[0] + _mean_of(teachers, 'train_flops') if teachers else None
        walls = [_mean_of(side, 'wall_seconds', machine) for side in (mine, theirs)]
        cells += [' / '.join(f'{f / 1e12:.0f}' if f else '-' for f in flops)
                  + (f' ({flops[0] / flops[1]:.2f}x)' if all(flops) else ''),
                  ' / '.join(f'{w:.0f} s' if w else '-' for w in walls), f'`--methods={name}`']
      else:
        cells += ['', '', '']
      lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def compiled_step(config):
  """The train step of `config` compiled for one device, for a real batch of its views."""
  import jax
  from vlp_jax import models, objectives, parallel
  from vlp_jax.data import formats
  from vlp_jax.data.loading import pipeline
  from vlp_jax.training import optim
  from vlp_jax.training.state import create_train_state
  from vlp_jax.training.step import train_step
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  tx = optim.make_optimizer(config.optim, config.total_steps, objective.late_starts())
  views = objectives.OBJECTIVES.get(config.objective.name).views(config)
  iterator = pipeline.train_iterator(formats.train_paths(config.data), views, pipeline.PipelineSettings(seed=0,
                                     global_batch_size=config.batch_size, process_index=0, process_count=1,
                                     teacher_path=config.data.teacher_embeddings))
  batch = pipeline.pop_status(next(iterator))[0]
  state = jax.eval_shape(lambda r: create_train_state(objective, tx, r), jax.random.key(0))
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  with jax.set_mesh(mesh):
    return jax.jit(lambda s, b, r: train_step(objective, tx, s, b, r), donate_argnums=0).lower(
        state, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch), jax.random.key(1)).compile()


def step_memory_bytes(config) -> int:
  """Peak bytes of the compiled train step on one device, for a real batch of this config's views."""
  from benchmarks.common import compiled_memory
  return compiled_memory(compiled_step(config))['peak_bytes']


def step_flops(config) -> float:
  """XLA's FLOPs of one train step of `config` on one device (what the trainer logs as perf/step_flops)."""
  from vlp_jax.training.flops import program_cost
  return program_cost(compiled_step(config))['flops']


def update_results(path: str, tables: str, budget: int = 1) -> None:
  """Replace what lies between the two lines of `results_markers(budget)` in the Markdown file `path` with `tables`;
  everything outside them stays. Raises ValueError, writing nothing, unless each marker is there exactly once."""
  begin, end = results_markers(budget)
  with open(path) as f:
    text = f.read()
  counts = {marker: text.count(marker) for marker in (begin, end)}
  if any(count != 1 for count in counts.values()) or text.index(begin) > text.index(end):
    raise ValueError(f'{path} must hold the line {begin!r} once and, after it, {end!r} once '
                     f'(found {counts[begin]} and {counts[end]}); nothing was written')
  head, rest = text.split(begin)
  tail = rest.split(end)[1]
  with open(path + '.tmp', 'w') as f:
    f.write(f'{head}{begin}\n\n{tables.strip()}\n\n{end}{tail}')
  os.replace(path + '.tmp', path)


def main(argv):
  del argv
  pairs = parse_pairs(FLAGS.compare)
  names = expand(FLAGS.methods + [name for pair in pairs for name in pair], FLAGS.compute_controls)
  seeds = [int(s) for s in FLAGS.seeds]
  budget = FLAGS.budget
  root, steps, store = of_budget(FLAGS.workdir, budget), FLAGS.steps, of_budget(FLAGS.store, budget)
  began = time.time()
  futures: dict[tuple[str, int], concurrent.futures.Future] = {}
  progress = Progress(planned_runs(names, seeds), store, FLAGS.jobs)
  if FLAGS.train:
    print(progress.first_line(), flush=True)
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(FLAGS.jobs, 1)) as pool:

    def job(name: str, seed: int) -> dict:
      row = train_with_prerequisites(root, name, seed, futures, steps, FLAGS.eval_every, store, FLAGS.jobs, budget)
      return progress.reported(row)

    def teacher_job(name: str, seed: int) -> dict:
      row = train(root, name, seed, steps, FLAGS.eval_every, store, FLAGS.jobs, budget)
      return progress.reported(row)

    def stored(name: str, seed: int) -> dict | None:
      row = stored_row(store, name, seed) if store else None
      if row is None and not FLAGS.train:
        print(f'{name} seed {seed}: not in {store}', flush=True)
      return row

    for seed in seeds:
      for name in names:
        if not FLAGS.train:
          futures[(name, seed)] = pool.submit(stored, name, seed)
          if RUNS[name].teacher:
            futures[(RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)] = pool.submit(
                stored, RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)
          continue
        if RUNS[name].teacher:
          teacher = (RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)
          if teacher not in futures:
            futures[teacher] = pool.submit(teacher_job, *teacher)
        futures[(name, seed)] = pool.submit(job, name, seed)
    rows = [row for f in futures.values() if (row := f.result()) is not None]
  rows, refused = tabulated(rows)
  for reason in refused:
    print(f'Left out of the tables: {reason}', flush=True)
  if pairs:
    print('\n' + comparison_table(rows, pairs))
    return
  memory = {}
  if FLAGS.memory:
    for name in names:
      memory[name] = step_memory_bytes(run_config(root, name, seeds[0], steps, budget=budget))
  markdown = (headline_table(rows, names) + '\n\nEvery run, mean ± std over its seeds:\n\n' + table(rows, names, memory)
              + '\n\nPer seed, against the control:\n\n' + paired_table(rows, names))
  footer = (f'\n\n{len(rows)} runs, seeds {",".join(map(str, seeds))}, ' + (
      f'{FLAGS.jobs} at a time: {(time.time() - began) / 60:.1f} min wall.' if FLAGS.train
      else f'tabulated from {os.path.relpath(store, ROOT)} (--notrain).'))
  print('\n' + markdown + footer)
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      f.write(markdown + footer + '\n')
  if FLAGS.update_results:
    seeds_held = ','.join(map(str, seeds))
    update_results(RESULTS_MD, headline_table(rows, names) + '\n\n<details><summary>Every run, mean ± std over its '
                   'seeds, and every run against its controls seed by seed</summary>\n\n' + table(rows, names, memory)
                   + '\n\n' + paired_table(rows, names) + f'\n\n</details>\n\n{len(rows)} runs, seeds {seeds_held}'
                   + (f', {budget}x the configs\' steps.' if budget != 1 else '.'), budget)
    entries = verdict_entries(rows, names)
    if entries:
      figure = verdict_figure(entries, f'The methods table{f", {budget}x the steps" if budget != 1 else ""}: '
                                       'each method against its controls on its headline metric')
      figure.savefig(verdict_plot_path(budget), dpi=100, bbox_inches='tight')
    print(f'Wrote the tables into {os.path.relpath(RESULTS_MD, ROOT)} and the plot into '
          f'{os.path.relpath(verdict_plot_path(budget), ROOT)}.')


if __name__ == '__main__':
  define_flags()
  app.run(main)
