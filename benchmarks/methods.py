#!/usr/bin/env python
"""Train each method on the embedded dataset under one budget, over several seeds, and tabulate mean +- std of the
metrics its paper reports beside CLIP's, with affinity consistency on every row.

python benchmarks/methods.py --seeds=0,1,2 [--methods=table] [--steps=N] [--jobs=2] [--workdir=/tmp/vlp_methods]
                             [--output=table.md] [--memory]

--methods takes run names (below), groups of them ('table', 'ablate_saco', 'ablate_zerovl', ...) or 'all'. Each
run is `python -m vlp_jax.main --config=configs/<config>.py --config.seed=S [overrides]` in a subprocess, exactly as
a user runs it, into WORKDIR/<run>/seed<S>; a finished run is not trained again, so an interrupted table resumes.
A continue-pre-training run starts from the checkpoint of the run it continues (same seed); a SaCo run with the
pseudo-affinity mimic uses as its frozen teacher a CLIP trained with another seed (seed + 1000) on the train split.

Prints one JSON line per finished run, then the Markdown table (also written to --output).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

TEACHER_SEED_OFFSET = 1000
LOW_DATA = '--config.data.synthetic.num_train=1000'  # per source; the val and test splits are unchanged
CLIP_NORM_2 = '--config.optim.grad_clip_norm=2.0'
TINY_DATA = '--config.data.synthetic.num_train=300'
DETAILED = '--config.data.synthetic.captions=detailed'  # every source names every object (data/synthetic.py)
SINGLE_SOURCE = '--config.data.mixing=single_source'  # ZeroVL's debiased sampling
LONG = '--config.total_steps=1600'
# slip_shapes.py trains on colour-only captions with whole-image CLIP views and SimCLR views on random backgrounds;
# these give back the alt-text captions, SLIP's random-crop CLIP view and the records' own backgrounds.
ALT_TEXT = '--config.data.synthetic.captions=alt_text'
PAPER_CROP = '--config.objective.clip_crop_scale=(0.5,1.0)'
KEEP_BG = '--config.objective.ssl_background=keep'
PAPER_VIEWS = (ALT_TEXT, PAPER_CROP, KEEP_BG)  # slip_shapes.py before part 9 of RESULTS.md
NEVER = 10**9  # an eval interval no run reaches: the loop still evaluates at its last step


@dataclasses.dataclass(frozen=True)
class Run:
  """One row of the table: a config file of configs/ (without .py) and command-line overrides.

  after: the run (same seed) whose final checkpoint initialises this one (continue pre-training).
  teacher: the run whose checkpoint, trained with seed + TEACHER_SEED_OFFSET, is SaCo's frozen mimic teacher.
  """
  config: str
  label: str
  overrides: tuple[str, ...] = ()
  after: str | None = None
  teacher: str | None = None
  control: str | None = None  # the run it is compared with, seed by seed, in the paired table (default: baseline)
  baseline: str = 'clip'  # the CLIP of the same data and budget, which every paired row also subtracts


RUNS: dict[str, Run] = {
    # The shipped recipes.
    'clip': Run('clip_shapes', 'CLIP'),
    'saco': Run('saco_shapes', 'CLIP + SaCo (from scratch)'),
    'clip_continue': Run('clip_continue_shapes', 'CLIP, continued (control for SaCo continue)', after='clip'),
    'saco_continue': Run('saco_continue_shapes', 'CLIP + SaCo, continued (Algorithm 2)', after='clip',
                         control='clip_continue'),
    'slip': Run('slip_shapes', 'SLIP (colour-only captions)', baseline='clip_colour_only'),
    'clip_colour_only': Run('clip_colour_only_shapes', 'CLIP, colour-only captions (control for SLIP)',
                            baseline='clip_colour_only'),
    'cosmos': Run('cosmos_shapes', 'COSMOS'),
    'zerovl': Run('zerovl_shapes', 'ZeroVL'),
    'siglip': Run('siglip_shapes', 'SigLIP'),
    # A CLIP with another seed: the mimic teacher of saco_mimic.
    'clip_teacher': Run('clip_shapes', 'CLIP (teacher seed)'),
    # SaCo ablations: the normalisation of the affinity distance, the remedies.
    'saco_sum': Run('saco_shapes', 'SaCo, alpha 5 on the sum over B^2 entries (pseudocode literally)',
                    ('--config.objective.saco.normalization=sum', '--config.objective.saco.ramp=constant')),
    'saco_alpha10': Run('saco_shapes', 'SaCo, alpha 10 (twice the recipe)', ('--config.objective.saco.alpha=10.0',)),
    'saco_no_ramp': Run('saco_shapes', 'SaCo, no ramp', ('--config.objective.saco.ramp=constant',)),
    'saco_mimic': Run('saco_shapes', 'SaCo + pseudo-affinity mimic (beta 5, separately seeded CLIP teacher)',
                      ('--config.objective.saco.beta=5.0', '--config.objective.saco.teacher=checkpoint'),
                      teacher='clip_teacher'),
    'saco_masking': Run('saco_shapes', 'SaCo + hard sample-wise masking (cosine > 0.5)',
                        ('--config.objective.saco.masking=hard',)),
    # ZeroVL ablations: one component at a time, from the recipe (mixup on mixed batches) and from the paper's three.
    'zerovl_debiased': Run('zerovl_debiased_shapes', "ZeroVL with the paper's three components (single-source "
                           'batches, mixup, text augmentation)'),
    'zerovl_single_source': Run('zerovl_shapes', 'ZeroVL (mixup) on single-source batches',
                                (SINGLE_SOURCE,)),
    'zerovl_text_augment': Run('zerovl_shapes', 'ZeroVL (mixup) with text augmentation',
                               ('--config.objective.text_augment=True',)),
    'zerovl_no_mixup': Run('zerovl_shapes', 'ZeroVL without mixup (CLIP through the ZeroVL objective)',
                           ('--config.objective.mixup=False',)),
    # Which half of the coin costs retrieval: the coin fixed to pixel mixup of the images, or to mixup of the
    # projected text embeddings (lam drawn as under the coin).
    'zerovl_image_mixup': Run('zerovl_shapes', 'ZeroVL, pixel mixup of the images on every step (coin fixed)',
                              ('--config.objective.mixup_modality=image',)),
    'zerovl_text_mixup': Run('zerovl_shapes', 'ZeroVL, mixup of the text embeddings on every step (coin fixed)',
                             ('--config.objective.mixup_modality=text',)),
    # The two-target loss on unmixed inputs: max(lam, 1 - lam) on the pair, the rest on the reversed partner (label
    # smoothing toward one other row), which is what mixup's targets add beside its mixed inputs.
    'zerovl_targets_only': Run('zerovl_shapes', "ZeroVL's two-target loss, nothing mixed (label smoothing)",
                               ('--config.objective.mixup_modality=targets_only',)),
    # A 4x longer budget (1600 steps, about 7 epochs of the train split): mixup and SimCLR are regularisers that
    # slow the fit, and 400 steps may end before they pay.
    'clip_long': Run('clip_shapes', 'CLIP, 1600 steps', (LONG,), baseline='clip_long'),
    'zerovl_long': Run('zerovl_shapes', 'ZeroVL (mixup), 1600 steps', (LONG,), baseline='clip_long'),
    'clip_crop_long': Run('clip_crop_shapes', "CLIP on SLIP's CLIP view, 1600 steps", (LONG,), baseline='clip_long'),
    'slip_long': Run('slip_shapes', "SLIP, the paper's views, alt-text captions, 1600 steps", (*PAPER_VIEWS, LONG),
                     baseline='clip_long', control='clip_crop_long'),
    'slip_no_crop_long': Run('slip_shapes', 'SLIP with the whole image as its CLIP view, 1600 steps',
                             (ALT_TEXT, KEEP_BG, LONG), baseline='clip_long'),
    'slip_no_crop_random_bg_long': Run('slip_shapes', 'SLIP without the crop, SimCLR views on random backgrounds, '
                                       '1600 steps', (ALT_TEXT, LONG),
                                       baseline='clip_long'),
    # The paper's constant temperature 0.02 (logit scale 50) instead of the learned one, with and without mixup.
    'zerovl_no_mixup_t002': Run('zerovl_shapes', "CLIP at ZeroVL's constant temperature 0.02 (ZeroVL, no mixup)",
                                ('--config.objective.mixup=False', '--config.objective.fixed_temperature=0.02')),
    'zerovl_t002': Run('zerovl_shapes', "ZeroVL (mixup) at the paper's constant temperature 0.02",
                       ('--config.objective.fixed_temperature=0.02',), control='zerovl_no_mixup_t002'),
    'clip_single_source': Run('clip_shapes', 'CLIP with single-source batches', (SINGLE_SOURCE,)),
    # Low data: the same 400 steps on a tenth of the train split (1000 pairs per source, about 17 epochs), where
    # CLIP overfits and the regularisers that ZeroVL's mixup and SLIP's SimCLR add have something to act on.
    'clip_lowdata': Run('clip_shapes', 'CLIP, low data (3000 pairs)', (LOW_DATA,), baseline='clip_lowdata'),
    'zerovl_lowdata': Run('zerovl_shapes', 'ZeroVL, low data', (LOW_DATA,), baseline='clip_lowdata'),
    'clip_crop_lowdata': Run('clip_crop_shapes', "CLIP on SLIP's CLIP view, low data", (LOW_DATA,),
                             baseline='clip_lowdata'),
    'slip_lowdata': Run('slip_shapes', "SLIP, the paper's views, low data", (*PAPER_VIEWS, LOW_DATA),
                        baseline='clip_lowdata',
                        control='clip_crop_lowdata'),
    # Very low data: 300 pairs per source, about 57 epochs in 400 steps, where CLIP memorises its pairs.
    'clip_tinydata': Run('clip_shapes', 'CLIP, 900 pairs', (TINY_DATA,), baseline='clip_tinydata'),
    'zerovl_tinydata': Run('zerovl_shapes', 'ZeroVL (mixup), 900 pairs', (TINY_DATA,), baseline='clip_tinydata'),
    # The source-biased setting of debiased sampling: every source's captions name every object (few repeated
    # captions inside a source), while images and phrasing still give the source away (data/synthetic.py).
    'clip_detailed': Run('clip_shapes', 'CLIP, detailed captions', (DETAILED,), baseline='clip_detailed'),
    'clip_detailed_single_source': Run('clip_shapes', 'CLIP, detailed captions, single-source batches',
                                       (DETAILED, SINGLE_SOURCE), baseline='clip_detailed'),
    'zerovl_detailed_mixed': Run('zerovl_shapes', 'ZeroVL (mixup on mixed batches), detailed captions', (DETAILED,),
                                 baseline='clip_detailed'),
    'zerovl_detailed_single_source': Run('zerovl_shapes', 'ZeroVL (mixup, single-source batches), detailed captions',
                                         (DETAILED, SINGLE_SOURCE), baseline='clip_detailed'),
    # ZeroVL starts from pre-trained encoders (appendix A.9: an ImageNet ViT-B/16 and BERT-Base). Here: the same
    # seed's trained `clip` (alt-text captions), then 400 steps on the detailed captions, every run from that start.
    'clip_pre_detailed': Run('clip_shapes', 'CLIP from a trained CLIP, detailed captions', (DETAILED,), after='clip',
                             baseline='clip_pre_detailed'),
    'clip_pre_detailed_single_source': Run('clip_shapes', 'CLIP from a trained CLIP, detailed captions, '
                                           'single-source batches', (DETAILED, SINGLE_SOURCE),
                                           after='clip', baseline='clip_pre_detailed'),
    'zerovl_pre_detailed_mixed': Run('zerovl_shapes', 'ZeroVL (mixup on mixed batches) from a trained CLIP, detailed '
                                     'captions', (DETAILED,), after='clip', baseline='clip_pre_detailed'),
    'zerovl_pre_detailed_single_source': Run('zerovl_shapes', 'ZeroVL (mixup, single-source batches) from a trained '
                                             'CLIP, detailed captions', (DETAILED, SINGLE_SOURCE),
                                             after='clip', baseline='clip_pre_detailed'),
    # Single-source steps swing the gradient norm by 11x between sources (benchmarks/batch_spread.py); clipping
    # every step to one norm takes that swing out of Adam's updates, on both kinds of batches.
    'clip_pre_detailed_clip2': Run('clip_shapes', 'CLIP from a trained CLIP, detailed captions, gradients clipped '
                                   'to norm 2', (DETAILED, CLIP_NORM_2), after='clip', baseline='clip_pre_detailed'),
    'clip_pre_detailed_single_source_clip2': Run(
        'clip_shapes', 'CLIP from a trained CLIP, detailed captions, single-source batches, gradients clipped to '
        'norm 2', (DETAILED, SINGLE_SOURCE, CLIP_NORM_2), after='clip',
        baseline='clip_pre_detailed', control='clip_pre_detailed_clip2'),
    # COSMOS ablations.
    'cosmos_no_caption': Run('cosmos_shapes', 'COSMOS, text crops from the long caption only (the paper\'s text)',
                             ('--config.objective.caption_in_text_crops=False',
                              '--config.objective.caption_first_global=False')),
    'cosmos_caption_pool': Run('cosmos_shapes', 'COSMOS, the short caption only as one more sentence of the pool',
                               ('--config.objective.caption_first_global=False',)),
    'cosmos_no_distill': Run('cosmos_shapes', 'COSMOS without L_cosmos (CLIP on its crops)',
                             ('--config.objective.distill_weight=0.0',)),
    'cosmos_paper_crop': Run('cosmos_shapes', "COSMOS, the paper's global image crops (RandomResizedCrop 0.4-1)",
                             ("--config.objective.global_crop_scale=(0.4,1.0)",)),
    'cosmos_keep_colour': Run('cosmos_shapes', 'COSMOS, crops without hue jitter and grayscale',
                              ("--config.objective.crop_color_jitter=(0.4,0.4,0.2,0.0)",
                               '--config.objective.crop_grayscale_prob=0.0')),
    # SLIP ablations.
    # SLIP's own views (a random crop for CLIP, the records' backgrounds for SimCLR) on the alt-text captions, as
    # slip_shapes.py was before part 9 of RESULTS.md; their control is clip_crop, CLIP on the same crop.
    'clip_crop': Run('clip_crop_shapes', "CLIP on SLIP's CLIP view (control for SLIP's views)"),
    'slip_paper_views': Run('slip_shapes', "SLIP, the paper's views, alt-text captions", PAPER_VIEWS,
                            control='clip_crop'),
    'slip_no_ssl': Run('slip_shapes', "SLIP's views, SimCLR weight 0",
                       (*PAPER_VIEWS, '--config.objective.ssl_scale=0.0'), control='clip_crop'),
    'slip_paper_colour': Run('slip_shapes', "SLIP, SLIP's SimCLR colour augmentation (hue jitter 0.1, grayscale 0.2)",
                             (*PAPER_VIEWS, "--config.objective.ssl_color_jitter=(0.4,0.4,0.4,0.1)",
                              '--config.objective.ssl_grayscale_prob=0.2')),
    'slip_no_crop': Run('slip_shapes', 'SLIP with the whole image as its CLIP view (no random crop)',
                        (ALT_TEXT, KEEP_BG)),
    # The SimCLR weight c, on whole-image CLIP views: does SimCLR's cost there scale with its share of the gradient,
    # and does a smaller share help?
    'slip_no_crop_ssl01': Run('slip_shapes', 'SLIP without the crop, SimCLR weight 0.1',
                              (ALT_TEXT, KEEP_BG, '--config.objective.ssl_scale=0.1')),
    # Whether SimCLR's cost comes from the per-image web background, an instance cue: each SimCLR view gets its own
    # random background (the records' class masks find it), so the two views share only their objects.
    'slip_no_crop_random_bg': Run('slip_shapes', 'SLIP without the crop, SimCLR views on random backgrounds',
                                  (ALT_TEXT,)),
    'slip_no_crop_random_bg_crop035': Run('slip_shapes',
                                          'SLIP without the crop, SimCLR views on random backgrounds, crops 0.35-1',
                                          (ALT_TEXT, '--config.objective.ssl_crop_scale=(0.35,1.0)')),
    # Captions that name colours but never shapes: what a model knows of shapes it learns from the images alone.
    # (clip_colour_only and slip, above: CLIP and SLIP on them.)
    'slip_colour_only_keep_bg': Run('slip_shapes', "SLIP, SimCLR views on the records' own backgrounds, colour-only "
                                    'captions', (KEEP_BG,), baseline='clip_colour_only'),
    'slip_no_crop_random_bg_ssl01': Run('slip_shapes',
                                        'SLIP without the crop, SimCLR views on random backgrounds, weight 0.1',
                                        (ALT_TEXT, '--config.objective.ssl_scale=0.1')),
}
GROUPS = {
    'table': ('clip', 'saco', 'clip_continue', 'saco_continue', 'clip_colour_only', 'slip', 'cosmos', 'zerovl'),
    'ablate_saco': ('clip', 'saco', 'saco_alpha10', 'saco_sum', 'saco_no_ramp', 'saco_masking', 'saco_mimic'),
    'ablate_zerovl': ('clip', 'zerovl', 'zerovl_debiased', 'zerovl_single_source', 'zerovl_text_augment',
                      'zerovl_no_mixup', 'clip_single_source', 'zerovl_no_mixup_t002', 'zerovl_t002'),
    'ablate_cosmos': ('clip', 'cosmos', 'cosmos_caption_pool', 'cosmos_no_caption', 'cosmos_no_distill',
                      'cosmos_paper_crop', 'cosmos_keep_colour'),
    'ablate_slip': ('clip', 'clip_crop', 'slip_paper_views', 'slip_no_ssl', 'slip_paper_colour', 'slip_no_crop'),
    'slip_weight': ('clip', 'slip_no_crop', 'slip_no_crop_ssl01'),
    # SLIP where its SimCLR has something to add: captions that never name a shape (RESULTS.md, part 9).
    'colour_only': ('clip_colour_only', 'slip', 'slip_colour_only_keep_bg'),
    'slip_background': ('clip', 'slip_no_crop', 'slip_no_crop_random_bg', 'slip_no_crop_ssl01',
                        'slip_no_crop_random_bg_ssl01'),
    # ZeroVL in the source-biased setting without repeated captions, from scratch and from a trained CLIP, with
    # and without clipping the gradient norm, and mixup on 900 pairs (RESULTS.md, part 7).
    'zerovl_settings': ('clip_detailed', 'clip_detailed_single_source', 'zerovl_detailed_mixed',
                        'zerovl_detailed_single_source', 'clip_pre_detailed', 'clip_pre_detailed_single_source',
                        'zerovl_pre_detailed_mixed', 'zerovl_pre_detailed_single_source', 'clip_pre_detailed_clip2',
                        'clip_pre_detailed_single_source_clip2', 'clip_tinydata', 'zerovl_tinydata'),
    # Which half of coin-flipping mixup costs retrieval (RESULTS.md, part 8).
    'ablate_mixup': ('clip', 'zerovl', 'zerovl_image_mixup', 'zerovl_text_mixup', 'zerovl_targets_only'),
    # Whether a 4x longer budget lets mixup and SimCLR pay (RESULTS.md, part 8).
    'long_budget': ('clip_long', 'zerovl_long', 'clip_crop_long', 'slip_long', 'slip_no_crop_long'),
    'lowdata': ('clip_lowdata', 'zerovl_lowdata', 'clip_crop_lowdata', 'slip_lowdata'),
}
# The columns: (metric key as 'eval set/metric', heading). Mean R@1 averages I2T and T2I.
COLUMNS = (
    ('synthetic/zeroshot_top1', 'zero-shot top-1'),
    ('synthetic/mean_r1', 'mean R@1, short captions'),
    ('synthetic/rsum', 'RSUM, short captions'),
    ('synthetic_long/mean_r1', 'mean R@1, long captions'),
    ('within_source/mean_r1', 'mean R@1 within a source'),
    ('synthetic/linear_probe_top1', 'linear probe top-1'),
    ('synthetic/affinity_consistency', 'affinity consistency'),
    ('synthetic/compositional_acc', 'compositional acc.'),
)

SOURCE_SETS = ('synthetic_studio', 'synthetic_web', 'synthetic_sketch')  # averaged into 'within_source'
FLAGS = flags.FLAGS


def define_flags() -> None:
  """Only when run as a script, so that tests can import the functions beside vlp_jax.main (which has --workdir)."""
  flags.DEFINE_list('methods', ['table'], f'Runs or groups: {sorted(RUNS)}; groups {sorted(GROUPS)}; all.')
  flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds (config.seed) to run every method with.')
  flags.DEFINE_integer('steps', None, "Override total_steps of every from-scratch run (default: the configs').")
  flags.DEFINE_integer('jobs', 2, 'Runs trained at once. Each uses every core, but compiles, evaluations and the input '
                       'pipeline leave some idle: two at once finish a set of runs about 15% sooner on a 2-core CPU. '
                       'The wall and step-time columns then include the sharing; --jobs=1 for clean timings.')
  flags.DEFINE_string('workdir', '/tmp/vlp_methods', 'Where the runs write (a rerun skips finished runs).')
  flags.DEFINE_string('output', '', 'Also write the Markdown table to this file.')
  flags.DEFINE_bool('memory', False, "Add each method's compiled train-step memory relative to CLIP.")
  flags.DEFINE_integer('eval_every', 0, 'Evaluate every N steps as well as at the end (0: at the end only, which '
                       'the table reads; the configs evaluate every 100 steps for their curves).')


def expand(names: list[str]) -> list[str]:
  """Run and group names -> run names, in order, without repeats, dependencies first."""
  out: list[str] = []

  def add(name: str) -> None:
    if name in out:
      return
    if name not in RUNS:
      raise ValueError(f"--methods has '{name}'; valid runs: {sorted(RUNS)}, groups: {sorted(GROUPS)}, 'all'")
    for needed in (RUNS[name].after, RUNS[name].teacher):
      if needed:
        add(needed)
    out.append(name)

  for name in names:
    for run in (RUNS if name == 'all' else GROUPS.get(name, (name,))):
      add(run)
  return out


def run_dir(workdir: str, name: str, seed: int) -> str:
  return os.path.join(workdir, name, f'seed{seed}')


def command(workdir: str, name: str, seed: int, steps: int | None, eval_every: int = 0) -> list[str]:
  """The `python -m vlp_jax.main` command line of run `name` with `seed`; eval_every 0 evaluates at the end only."""
  run = RUNS[name]
  args = [sys.executable, '-m', 'vlp_jax.main', f'--config=configs/{run.config}.py',
          f'--workdir={run_dir(workdir, name, seed)}', f'--config.seed={seed}', *run.overrides,
          f'--config.eval.every_steps={eval_every or NEVER}']
  if run.after:
    args.append(f'--config.init.checkpoint={run_dir(workdir, run.after, seed)}')
  elif steps:  # a continue phase keeps its own (short) budget
    args.append(f'--config.total_steps={steps}')
  if run.teacher:
    teacher = run_dir(workdir, run.teacher, seed + TEACHER_SEED_OFFSET)
    args.append(f'--config.objective.saco.teacher_checkpoint={teacher}')
  return args


def final_metrics(workdir: str) -> dict:
  """The last logged value of every eval metric ('<set>/<metric>'), plus mean R@1 per set, the mean samples/s
  and the run's wall time."""
  metrics, rates = {}, []
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    for line in f:
      record = json.loads(line)
      metrics.update({k[len('eval/'):]: v for k, v in record.items() if k.startswith('eval/')})
      if 'perf/samples_per_sec' in record:
        rates.append(record['perf/samples_per_sec'])
  for key in [k for k in metrics if k.endswith('/i2t_r1')]:
    prefix = key[:-len('i2t_r1')]
    metrics[f'{prefix}mean_r1'] = (metrics[key] + metrics[f'{prefix}t2i_r1']) / 2
    recalls = [f'{prefix}{d}_r{k}' for d in ('i2t', 't2i') for k in (1, 5, 10)]
    if all(r in metrics for r in recalls):  # ZeroVL's retrieval figure: the six recalls in percent, summed
      metrics[f'{prefix}rsum'] = 100 * sum(metrics[r] for r in recalls)
  per_source = [metrics[f'{name}/mean_r1'] for name in SOURCE_SETS if f'{name}/mean_r1' in metrics]
  if len(per_source) == len(SOURCE_SETS):
    metrics['within_source/mean_r1'] = sum(per_source) / len(per_source)
  metrics['samples_per_sec'] = sum(rates) / max(len(rates), 1)
  return metrics


def run_env(root: str) -> dict[str, str]:
  """The runs' environment: JAX's persistent compilation cache under the workdir (unless one is set already), so
  that every run after the first of a config loads its compiled step instead of compiling it (same programs, same
  results; about 9 s saved per tiny-model run)."""
  return {'JAX_COMPILATION_CACHE_DIR': os.path.join(root, 'jax_cache'), **os.environ}


def train(root: str, name: str, seed: int, steps: int | None, lock: threading.Lock, eval_every: int = 0) -> dict:
  workdir = run_dir(root, name, seed)
  done = os.path.join(workdir, 'run_result.json')
  if os.path.exists(done):
    with open(done) as f:
      return json.load(f)
  began = time.time()
  result = subprocess.run(command(root, name, seed, steps, eval_every), cwd=ROOT, capture_output=True, text=True,
                          env=run_env(root))
  if result.returncode != 0:
    raise RuntimeError(f'{name} (seed {seed}) failed with exit code {result.returncode}:\n{result.stderr[-3000:]}')
  row = {'run': name, 'seed': seed, **final_metrics(workdir), 'wall_seconds': round(time.time() - began, 1)}
  with open(done, 'w') as f:
    json.dump(row, f)
  with lock:
    print(json.dumps(row), flush=True)
  return row


def mean_std(values: list[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (0 for one value)."""
  mean = sum(values) / len(values)
  var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
  return mean, math.sqrt(var)


def table(rows: list[dict], names: list[str], memory: dict[str, float]) -> str:
  """Markdown: one line per run name, mean +- std over its seeds for every column, wall time, step time vs CLIP."""
  by_name = {name: [r for r in rows if r['run'] == name] for name in names}
  base = by_name.get('clip') or next(iter(by_name.values()))
  base_rate = sum(r['samples_per_sec'] for r in base) / len(base)
  heads = [h for _, h in COLUMNS] + ['wall per run', 'step time vs CLIP'] + (['step memory vs CLIP'] if memory else [])
  lines = ['| run | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name, runs in by_name.items():
    if not runs or name == 'clip_teacher':
      continue
    cells = []
    for key, _ in COLUMNS:
      values = [r[key] for r in runs if r.get(key) is not None]
      digits = 1 if key.endswith('rsum') else 3  # RSUM is in percent
      cells.append(f'{mean_std(values)[0]:.{digits}f} ± {mean_std(values)[1]:.{digits}f}' if values else '-')
    rate = sum(r['samples_per_sec'] for r in runs) / len(runs)
    cells += [f"{sum(r['wall_seconds'] for r in runs) / len(runs):.0f} s", f'{base_rate / rate:.2f}x']
    if memory:
      cells.append(f"{memory[name] / memory.get('clip', memory[name]):.2f}x" if name in memory else '-')
    seeds = ','.join(str(r['seed']) for r in runs)
    lines.append(f'| {RUNS[name].label} (`{name}`, seeds {seeds}) | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def paired_table(rows: list[dict], names: list[str]) -> str:
  """Markdown: each run minus its baseline CLIP (and minus its own control, where that is another run), seed by seed.

  Seeds move every metric a lot at this scale (CLIP's zero-shot spans 0.20-0.33 over seeds 0-2), and a method
  trained with the same seed shares its initialisation and data order with its control, so the per-seed difference
  is the sharper comparison. Cells: mean ± std of the difference, then how many seeds the run is ahead on.
  """
  by_key = {(r['run'], r['seed']): r for r in rows}
  heads = [h for _, h in COLUMNS]
  lines = ['| run − control | ' + ' | '.join(heads) + ' |', '|---' * (len(heads) + 1) + '|']
  for name in names:
    spec = RUNS[name]
    if name in ('clip', 'clip_teacher') or not any(r['run'] == name for r in rows):
      continue
    for control in dict.fromkeys((spec.baseline, spec.control or spec.baseline)):
      if control == name:
        continue
      seeds = sorted(seed for (run, seed) in by_key if run == name and (control, seed) in by_key)
      if not seeds:
        continue
      cells = []
      for key, _ in COLUMNS:
        diffs = [by_key[(name, s)][key] - by_key[(control, s)][key] for s in seeds
                 if by_key[(name, s)].get(key) is not None and by_key[(control, s)].get(key) is not None]
        digits = 1 if key.endswith('rsum') else 3
        mean, std = mean_std(diffs) if diffs else (0.0, 0.0)
        ahead = sum(d > 0 for d in diffs)
        cells.append(f'{mean:+.{digits}f} ± {std:.{digits}f} ({ahead}/{len(diffs)})' if diffs else '-')
      lines.append(f'| `{name}` − `{control}` (seeds {",".join(map(str, seeds))}) | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def step_memory_bytes(config) -> int:
  """Peak bytes of the compiled train step on one device, for a real batch of this config's views."""
  import jax
  from vlp_jax import models, objectives, parallel
  from vlp_jax.data import datasets, pipeline
  from vlp_jax.training import optim
  from vlp_jax.training.state import create_train_state
  from vlp_jax.training.step import train_step
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  tx = optim.make_optimizer(config.optim, config.total_steps)
  iterator = pipeline.train_iterator(datasets.train_paths(config.data), objectives.get(config.objective.name).views(
      config), seed=0, global_batch_size=config.batch_size, process_index=0, process_count=1,
                                     teacher_path=config.data.teacher_embeddings)
  batch = pipeline.pop_status(next(iterator))[0]
  state = jax.eval_shape(lambda r: create_train_state(objective, tx, r), jax.random.key(0))
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  with jax.set_mesh(mesh):
    compiled = jax.jit(lambda s, b, r: train_step(objective, tx, s, b, r), donate_argnums=0).lower(
        state, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch), jax.random.key(1)).compile()
  from benchmarks.common import compiled_memory
  return compiled_memory(compiled)['peak_bytes']


def main(argv):
  del argv
  names = expand(FLAGS.methods)
  seeds = [int(s) for s in FLAGS.seeds]
  root, steps = FLAGS.workdir, FLAGS.steps
  lock = threading.Lock()
  began = time.time()
  futures: dict[tuple[str, int], concurrent.futures.Future] = {}
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(FLAGS.jobs, 1)) as pool:

    def job(name: str, seed: int) -> dict:
      run = RUNS[name]
      if run.after:  # submitted earlier, so already running or done: no deadlock with a FIFO pool
        futures[(run.after, seed)].result()
      if run.teacher:
        futures[(run.teacher, seed + TEACHER_SEED_OFFSET)].result()
      return train(root, name, seed, steps, lock, FLAGS.eval_every)

    for seed in seeds:
      for name in names:
        if RUNS[name].teacher:
          teacher = (RUNS[name].teacher, seed + TEACHER_SEED_OFFSET)
          if teacher not in futures:
            futures[teacher] = pool.submit(train, root, teacher[0], teacher[1], steps, lock,
                                             FLAGS.eval_every)
        futures[(name, seed)] = pool.submit(job, name, seed)
    rows = [f.result() for f in futures.values()]
  memory = {}
  if FLAGS.memory:
    from vlp_jax.config import from_file
    for name in names:
      memory[name] = step_memory_bytes(from_file(os.path.join(ROOT, 'configs', f'{RUNS[name].config}.py')))
  markdown = table(rows, names, memory) + '\n\nPer seed, against the control:\n\n' + paired_table(rows, names)
  footer = (f'\n\n{len(rows)} runs, seeds {",".join(map(str, seeds))}, {FLAGS.jobs} at a time: '
            f'{(time.time() - began) / 60:.1f} min wall.')
  print('\n' + markdown + footer)
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      f.write(markdown + footer + '\n')


if __name__ == '__main__':
  define_flags()
  app.run(main)
