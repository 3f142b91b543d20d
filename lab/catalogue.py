"""Every run of the methods table, as data: its config (a shipped `configs/<name>_shapes.py` or a file of
lab/experiments/, with its argument where the file takes one), its heading and what it is compared with.

  config           the `--config` value it trains (relative to the repository root; 'file.py:arg' -> get_config(arg))
  label            the row's heading in the tables
  metrics          the metrics its paper reports ('set/metric' keys of COLUMNS), declared before any run; the first
                   decides the verdict. Only runs with metrics get a row in the headline table.
  control          the run it is compared with, seed by seed (default: baseline)
  compute_controls the controls trained for as many FLOPs as this run (docs/evidence.md, rule 1)
  baseline         the CLIP run of the same data and budget that the paired table also subtracts
  after            the run (same seed) whose final checkpoint initialises this one (continue pre-training)
  teacher          the run whose checkpoint, trained with seed + TEACHER_SEED_OFFSET, is SaCo's frozen mimic teacher
"""
from __future__ import annotations

import dataclasses
import os

from vlp_jax.config import from_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
TEACHER_SEED_OFFSET = 1000
DEV_SEEDS = (0, 1, 2)  # the only seeds a choice of setting may look at (docs/evidence.md)
# Declared in docs/evidence.md on 2026-11-27, before any run of them: never used to choose anything. (4 and 5, the
# earlier held-out seeds, had been trained and reported before the rules; they are no longer held out.)
HELD_OUT_SEEDS = (11, 12, 13)
SECOND_BUDGET = 4  # the table's second budget, fixed before its runs (docs/evidence.md): 4x every run's steps
# The learning-curve protocol (docs/evidence.md, declared 2026-11-29): its held-out seeds, never run before it; the
# learning rates checked on DEV_SEEDS at RATE_CHECK_BUDGET, the tie going to SHARED_RATE; the curves' budget, evaluated
# every CURVE_EVALUATIONS-th of a run.
CURVE_SEEDS = (21, 22, 23)
LEARNING_RATES = (5e-4, 1e-3, 2e-3)
SHARED_RATE = 1e-3
RATE_CHECK_BUDGET = 2
CURVE_BUDGET = 8
CURVE_EVALUATIONS = 8
SOURCE_SETS = ('synthetic_studio', 'synthetic_web', 'synthetic_sketch')  # averaged into 'within_source'

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
  """One row of the table: the `--config` value it trains and what the runner reads beside it (module docstring)."""
  config: str
  label: str
  after: str | None = None
  teacher: str | None = None
  control: str | None = None
  baseline: str = 'clip'
  metrics: tuple[str, ...] = ()
  compute_controls: tuple[str, ...] = ()


def shipped(name: str) -> str:
  return f'configs/{name}_shapes.py'


def experiment(name: str, arg: str | None = None) -> str:
  return f'lab/experiments/{name}.py' + (f':{arg}' if arg else '')


# the metrics each family's paper reports, declared before any run (the first decides the verdict)
CLIP_METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1')  # zero-shot, then retrieval
# zero-shot, retrieval, linear probe, and affinity consistency, taken within each source (pooled, the source blocks
# make it high for any model that separates the sources: docs/data.md)
SACO_METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/linear_probe_top1',
                'within_source/affinity_consistency')
COSMOS_METRICS = ('synthetic/mean_r1', 'synthetic/zeroshot_top1', 'synthetic_long/mean_r1')  # retrieval first
ZEROVL_METRICS = ('synthetic/rsum', 'synthetic/zeroshot_top1')  # retrieval RSUM, then zero-shot
# SigLIP 2's claims over SigLIP (its Tables 1-6): zero-shot and retrieval, then localisation (referring expressions
# from frozen features, the same probe for both), dense features (segmentation) and the linear probe
SIGLIP2_METRICS = ('synthetic/zeroshot_top1', 'synthetic/mean_r1', 'synthetic/referring_probe_acc50',
                   'synthetic/segmentation_miou', 'synthetic/linear_probe_top1')
SIGLIP2_ABLATION = dict(metrics=SIGLIP2_METRICS, control='siglip_regions', baseline='clip_regions')

RUNS: dict[str, Run] = {
    # the shipped recipes and their continue phases (configs/<name>_shapes.py)
    'clip': Run(shipped('clip'), 'CLIP'),
    'clip_continue': Run(shipped('clip_continue'), 'CLIP, continued (control for SaCo continue)', after='clip'),
    'cosmos': Run(shipped('cosmos'), 'COSMOS', control='clip_text_pool_augment_ema', metrics=COSMOS_METRICS,
                  compute_controls=('clip_text_pool_compute', 'clip_cosmos_compute')),
    'saco': Run(shipped('saco'), 'CLIP + SaCo (from scratch)', metrics=SACO_METRICS),
    'saco_continue': Run(shipped('saco_continue'), 'CLIP + SaCo, continued (Algorithm 2)', after='clip',
                         control='clip_continue', metrics=SACO_METRICS),
    'siglip': Run(shipped('siglip'), 'SigLIP'),
    'siglip2': Run(shipped('siglip2'), 'SigLIP 2', compute_controls=('siglip_compute',), **SIGLIP2_ABLATION),
    'siglip2_continue': Run(shipped('siglip2_continue'), 'SigLIP 2, continued (decoder and heads fresh)',
                            after='siglip2', baseline='clip_regions'),
    'slip': Run(shipped('slip'), 'SLIP', metrics=('synthetic/zeroshot_top1', 'synthetic/linear_probe_top1'),
                compute_controls=('clip_slip_compute',)),
    'zerovl': Run(shipped('zerovl'), 'ZeroVL', control='clip_zerovl_temperature', metrics=ZEROVL_METRICS),
    # controls, ablations and speed levers (lab/experiments/)
    'clip_bf16': Run(experiment('clip_bf16'),
                     'CLIP computing in bf16 (float32 parameters, optimizer state and loss)', metrics=CLIP_METRICS),
    'clip_cosmos_compute': Run(experiment('clip_cosmos_compute'),
                               "plain CLIP for COSMOS's FLOPs (compute-matched control)"),
    'clip_mimic_compute': Run(experiment('clip_mimic_compute'),
                              "CLIP for the FLOPs of SaCo's mimic and its teacher (compute-matched control)"),
    'clip_patch_dropout': Run(experiment('clip_patch_dropout'), 'CLIP with patch dropout 0.5 (FLIP)',
                              metrics=CLIP_METRICS),
    'clip_regions': Run(experiment('clip_regions'), 'CLIP (records with regions)',
                        baseline='clip_regions'),  # itself, as clip is its own
    'clip_slip_compute': Run(experiment('clip_slip_compute'), "CLIP for SLIP's FLOPs (compute-matched control)"),
    'clip_teacher': Run(experiment('clip_teacher'), 'CLIP (teacher seed)'),
    'clip_text_pool': Run(experiment('clip_text_pool'), "CLIP on COSMOS's text pool (control for COSMOS)"),
    'clip_text_pool_augment_ema': Run(
        experiment('clip_text_pool_augment_ema'),
        "CLIP on COSMOS's text pool with its image augmentations and an EMA (COSMOS's baseline)"),
    'clip_text_pool_compute': Run(experiment('clip_text_pool_compute'),
                                  "CLIP on COSMOS's text pool for COSMOS's FLOPs (compute-matched control)"),
    'clip_zerovl_temperature': Run(experiment('clip_zerovl_temperature'),
                                   'CLIP with the temperature initialised at 0.02 (control for ZeroVL)'),
    'cosmos_no_distill': Run(experiment('cosmos_no_distill'), 'COSMOS without L_cosmos (multi-crop CLIP on its crops)',
                             control='clip_text_pool_augment_ema', metrics=COSMOS_METRICS),
    # the teacher's training counts as the method's compute, for each of the three mimic rows
    'saco_constant': Run(experiment('saco_constant'), 'SaCo, Algorithm 1 (constant alpha 5 beside the mimic, beta 5)',
                         teacher='clip_teacher', metrics=SACO_METRICS, compute_controls=('clip_mimic_compute',)),
    'saco_masking': Run(experiment('saco_masking'), 'SaCo + hard sample-wise masking (cosine > 0.5 kept)',
                        metrics=SACO_METRICS),
    'saco_mimic': Run(experiment('saco_mimic'),
                      'SaCo + pseudo-affinity mimic (beta 5, separately seeded CLIP teacher)',
                      teacher='clip_teacher', metrics=SACO_METRICS, compute_controls=('clip_mimic_compute',)),
    'saco_mimic_only': Run(experiment('saco_mimic_only'), 'pseudo-affinity mimic alone (beta 5, alpha 0)',
                           teacher='clip_teacher', metrics=SACO_METRICS, compute_controls=('clip_mimic_compute',)),
    'saco_no_ramp': Run(experiment('saco_no_ramp'), 'SaCo, no ramp', metrics=SACO_METRICS),
    # SigLIP 2's ablations, one config file with an argument each (versus siglip2: what each part adds; expected:
    # captions_only's referring accuracy falls towards siglip_regions', shuffled_boxes' to about captions_only's)
    'siglip2_captions_only': Run(experiment('siglip2_ablation', 'captions_only'),
                                 'SigLIP 2 with a captioning-only decoder', **SIGLIP2_ABLATION),
    'siglip2_decoder_only': Run(experiment('siglip2_ablation', 'decoder_only'),
                                'SigLIP 2 without SILC and TIPS (sigmoid + decoder)', **SIGLIP2_ABLATION),
    'siglip2_distill_only': Run(experiment('siglip2_ablation', 'distill_only'),
                                'SigLIP 2 with SILC only (sigmoid + late self-distillation)', **SIGLIP2_ABLATION),
    'siglip2_masked_only': Run(experiment('siglip2_ablation', 'masked_only'),
                               'SigLIP 2 with TIPS only (sigmoid + late masked prediction)', **SIGLIP2_ABLATION),
    'siglip2_shuffled_boxes': Run(experiment('siglip2_ablation', 'shuffled_boxes'),
                                  'SigLIP 2 with boxes shuffled across images', **SIGLIP2_ABLATION),
    # SigLIP 2's boxes (docs/evidence.md, a decisive experiment; lab/diagnostics/siglip2_boxes.py): the decoder alone,
    # on referring expressions, from siglip_compute's frozen towers, with the records' own boxes or shuffled ones
    'siglip2_boxes_decoder': Run(experiment('siglip2_boxes_decoder', 'true'),
                                 "SigLIP 2's decoder alone on siglip_compute's frozen towers (referring only)",
                                 after='siglip_compute', baseline='clip_regions'),
    'siglip2_boxes_decoder_shuffled': Run(experiment('siglip2_boxes_decoder', 'shuffled'),
                                          "SigLIP 2's decoder alone on siglip_compute's frozen towers, boxes shuffled",
                                          after='siglip_compute', baseline='clip_regions'),
    'siglip_compute': Run(experiment('siglip_compute'),
                          "SigLIP on SigLIP 2's records for SigLIP 2's FLOPs (compute-matched control)",
                          baseline='clip_regions'),
    'siglip_regions': Run(experiment('siglip_regions'), 'SigLIP (records with regions)', baseline='clip_regions'),
    'zerovl_mixup': Run(experiment('zerovl_component', 'mixup'),
                        'ZeroVL, coin-flipping mixup alone (mixed batches, no text augmentation)',
                        control='clip_zerovl_temperature', metrics=ZEROVL_METRICS),
    'zerovl_single_source': Run(experiment('zerovl_component', 'single_source'),
                                'ZeroVL, debiased (single-source) batches alone (no mixup, no text augmentation)',
                                control='clip_zerovl_temperature', metrics=ZEROVL_METRICS),
    'zerovl_text_augment': Run(experiment('zerovl_component', 'text_augment'),
                               'ZeroVL, word-level text augmentation alone (mixed batches, no mixup)',
                               control='clip_zerovl_temperature', metrics=ZEROVL_METRICS),
}

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
# the learning-curve protocol's pairs (method, control, the method's declared metrics, the first its headline), in the
# order of its table; siglip_regions declares none in RUNS (the methods table reads it only as SigLIP 2's control), so
# the protocol's headline for it, zero-shot top-1, is its only one
CURVE_PAIRS = (
    ('saco', 'clip', SACO_METRICS),
    ('slip', 'clip', RUNS['slip'].metrics),
    ('cosmos', 'clip_text_pool_augment_ema', COSMOS_METRICS),
    ('zerovl', 'clip_zerovl_temperature', ZEROVL_METRICS),
    ('siglip_regions', 'clip_regions', ('synthetic/zeroshot_top1',)),
    ('siglip2', 'siglip_regions', SIGLIP2_METRICS),
)
GROUPS['curves'] = tuple(dict.fromkeys(name for method, control, _ in CURVE_PAIRS for name in (control, method)))
GROUPS['table'] = tuple(dict.fromkeys(name for group in ('saco', 'slip', 'cosmos', 'zerovl', 'siglip2')
                                        for name in GROUPS[f'table_{group}']))


def curve_headline(name: str, pairs=CURVE_PAIRS) -> str:
  """The headline metric run `name` of the curves is judged on: its own pair's first metric where it is a method, its
  pair's where it is a control (docs/evidence.md); a ValueError where it is no curve run or its pairs disagree."""
  found = {metrics[0] for method, control, metrics in pairs if name in (method, control)}
  if len(found) != 1:
    raise ValueError(f'run {name}: headline metrics {sorted(found)} in the curve pairs; need exactly one')
  return found.pop()


def config_file(run: Run) -> tuple[str, str | None]:
  """(the file, relative to the root; its get_config argument or None) of `run.config`."""
  path, _, arg = run.config.partition(':')
  return path, arg or None


def load_config(name: str, runs: dict[str, Run] = RUNS):
  """The config run `name` trains, as `--config=<its config>` loads it (before the runner's own flags)."""
  path, arg = config_file(runs[name])
  return from_file(os.path.join(ROOT, path), arg)


def check(runs: dict[str, Run] = RUNS, groups: dict[str, tuple[str, ...]] = GROUPS) -> None:
  """ValueError where a run names a run that is not one, declares a metric that is no column, or a group holds an
  unknown run or shares a run's name."""
  columns = dict(COLUMNS)
  for name, run in runs.items():
    for field in ('baseline', 'control', 'compute_controls', 'after', 'teacher'):
      value = getattr(run, field)
      for other in value if isinstance(value, tuple) else (value,):
        if other is not None and other not in runs:
          raise ValueError(f"run {name}: {field} names '{other}', which is not a run; runs: {sorted(runs)}")
    unknown = [m for m in run.metrics if m not in columns]
    if unknown:
      raise ValueError(f'run {name}: metrics must be among {list(columns)}; unknown: {unknown}')
  for group, names in groups.items():
    if group in runs or not set(names) <= set(runs):
      raise ValueError(f'group {group}: a run of that name, or unknown runs {sorted(set(names) - set(runs))}')


def expand(names: list[str], compute_controls: bool = True, runs: dict[str, Run] = RUNS) -> list[str]:
  """Run and group names -> run names, in order, without repeats, each after the runs it starts from or is compared
  with (its compute-matched controls too, unless `compute_controls` is false)."""
  out: list[str] = []

  def add(name: str) -> None:
    if name in out:
      return
    if name not in runs:
      raise ValueError(f"--methods has '{name}'; valid runs: {sorted(runs)}, groups: {sorted(GROUPS)}, 'all'")
    run = runs[name]
    # (a teacher is trained with seed + TEACHER_SEED_OFFSET by the runner, not as a row of the requested seeds)
    for needed in (run.after, run.baseline, run.control, *(run.compute_controls if compute_controls else ())):
      if needed and needed != name:
        add(needed)
    out.append(name)

  for name in names:
    for run in (runs if name == 'all' else GROUPS.get(name, (name,))):
      add(run)
  return out


check()
