"""Issue 64, SigLIP 2's boxes: the decisive experiment declared in docs/evidence.md ("The learning-curve protocol",
"SigLIP 2's boxes"), run as declared. The finding it tests (lab/readings/siglip2.md): "the decoder's boxes are a
prior, not grounding" (referring Acc@0.5 0.101 against the mean box's 0.072, mIoU equal to the mean box's).

Part 1, probe (no new kind of training). The table's checkpoints are not kept, so `siglip2` and
`siglip2_shuffled_boxes` are trained again as the table trains them (the runner's command: lab/runner.py `train`,
400 steps, evaluated at the end), development seeds 0, 1, 2. On the held-out split's referring-expression pairs
(config.eval.split, 'test': every region of every image) each run's decoder predicts the box exactly as the referring
evaluator does (evaluation/referring.py `decoder_boxes`: greedy coordinate tokens after [AREF] description [SEP]),
on the images and on the images flipped left to right. Read per seed:
  - the slope of the predicted box centre on the true one, x and y apart (ordinary least squares), with a 95%
    interval clustered by image (the pairs of one image share it: CR1 sandwich, t with images - 1 degrees of freedom);
  - the flip. It maps a true centre x to 1 - x, so a learned location moves its predicted x by 1 - 2x; a prior that
    ignores the image does not move. Read: the slope of the predicted shift (x on the flipped image minus x on the
    image) on that expected shift (clustered interval as above), and the mean |shift| against the mean |1 - 2x|.
    The region descriptions are 'size colour shape' ('small blue star', data/sources/synthetic_shapes.py
    `scene_regions`): no word of position, and none of the six shapes is chiral, so the flipped image still holds
    exactly the object the text describes, at the mirrored box (pixel columns reversed; boxes are fractions of the
    side). The flip therefore changes the image alone, the text and its truth fixed: it measures how the predicted
    centre responds to the image, and whether that response is the mirror the truth makes. (The script counts the
    descriptions holding 'left' or 'right' and prints the count: 0 expected.)
  Reading (declared): a learned location gives a slope near 1 and centres that follow the flip (follow slope near 1);
  a prior gives a slope near 0 and no response (follow slope near 0, |shift| near 0). The true-box model beside the
  shuffled-box one, seed by seed; the seeds' paired differences (true - shuffled, 2 degrees of freedom) and the
  pooled figures are description only.

Part 2, decoder. `siglip_compute` (SigLIP for SigLIP 2's FLOPs, its config as shipped) is trained for seeds 0 and 1,
then from its checkpoint LocCa's decoder alone (lab/experiments/siglip2_boxes_decoder.py: towers locked, sigmoid
weight 0, referring expressions only, 8 coordinate bins per axis, 1,600 steps) with the records' own boxes
(`siglip2_boxes_decoder`) and with boxes shuffled across images (`siglip2_boxes_decoder_shuffled`), seeds 0 and 1,
evaluated every 400 steps (the intermediate points are description) and at the end. Read at step 1,600 on the
held-out split: the referring evaluator's Acc@0.5 and mIoU, the paired difference true - shuffled per seed, and its
mean with the 95% Student-t interval (2 seeds: 1 degree of freedom, t = 12.7). Reading (declared): a gap whose
interval excludes zero means the decoder can learn location from these towers; an interval holding zero is "not
distinguishable", and says only that. Described beside it: the quantisation ceiling (the true boxes rounded to 8
bins), the mean box, zero-shot top-1 against siglip_compute's own (the towers must not have moved), and the centre
slopes and flip of Part 1 for these decoders.

Rows: lab/results/diagnostics/2026-12-02_siglip2_boxes/: runs/<run>/seed<k>.json (the runner's rows; a stored row is
not trained again), probe/<run>_seed<k>.json (each run's predicted coordinate bins; probe/test_pairs.json the pairs
and their true boxes), boxes.png. Workdirs under --workdir (checkpoints, never in git).

python -m lab.diagnostics.siglip2_boxes [--part=probe|decoder|all]   # runs what is missing, then reads
python -m lab.diagnostics.siglip2_boxes --read   # reads the stored rows only (from the repository root: it imports lab)
"""
from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np
import scipy.stats
from matplotlib.figure import Figure

from lab import runner
from lab.statistics import paired_interval
from vlp_jax import evalsets, models, objectives, parallel
from vlp_jax.checkpoint_files import load_variables, resolve_checkpoint
from vlp_jax.data.image import image_ops
from vlp_jax.data.text import locca_tasks
from vlp_jax.evaluation import referring
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.models import locca
from vlp_jax.models.transformer import BlockStack, in_layout
from vlp_jax.training.checkpoint import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, 'lab', 'results', 'diagnostics', '2026-12-02_siglip2_boxes')
WORKDIR = '/work/runs/boxes_work'
PROBE_RUNS = ('siglip2', 'siglip2_shuffled_boxes')  # (true boxes, shuffled boxes)
PROBE_SEEDS = (0, 1, 2)
TOWERS = 'siglip_compute'
DECODER_RUNS = ('siglip2_boxes_decoder', 'siglip2_boxes_decoder_shuffled')  # (true, shuffled)
DECODER_SEEDS = (0, 1)
DECODER_EVAL_EVERY = 400
CONFIDENCE = 0.95
METRICS = ('synthetic/referring_decoder_acc50', 'synthetic/referring_decoder_miou')
POSITION_WORDS = ('left', 'right')


# ------------------------------------------------------------------------------------------ the arithmetic


def box_centres(boxes: np.ndarray) -> np.ndarray:
  """[M, 4] boxes (xmin, ymin, xmax, ymax) -> [M, 2] centres (x, y)."""
  boxes = np.asarray(boxes, np.float64)
  return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], axis=1)


def flipped_boxes(boxes: np.ndarray) -> np.ndarray:
  """[M, 4] boxes -> the same boxes in the image flipped left to right: (1 - xmax, ymin, 1 - xmin, ymax)."""
  boxes = np.asarray(boxes, np.float64)
  return np.stack([1 - boxes[:, 2], boxes[:, 1], 1 - boxes[:, 0], boxes[:, 3]], axis=1)


def flipped_images(images: np.ndarray) -> np.ndarray:
  """[N, H, W, C] -> the images flipped left to right (columns reversed)."""
  return np.ascontiguousarray(np.asarray(images)[:, :, ::-1])


def slope_fit(x: np.ndarray, y: np.ndarray, clusters: np.ndarray | None = None, confidence: float = CONFIDENCE
              ) -> dict:
  """Ordinary least squares y = a + b x over [M] pairs: {'slope', 'intercept', 'se', 'low', 'high', 'n', 'groups'}.
  The interval is slope -/+ t * se: without clusters the classical one (t with M - 2 degrees of freedom); with
  [M] cluster labels, the CR1 sandwich, se^2 = G/(G-1) (M-1)/(M-2) sum_g (sum_{i in g} (x_i - mean x) e_i)^2 / Sxx^2
  with G clusters and t with G - 1 degrees of freedom. Where x does not vary, every figure but n is nan."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  n = len(x)
  dx = x - x.mean()
  sxx = float(np.sum(dx * dx))
  if sxx == 0:
    nan = float('nan')
    return {'slope': nan, 'intercept': nan, 'se': nan, 'low': nan, 'high': nan, 'n': n, 'groups': nan}
  slope = float(np.sum(dx * (y - y.mean())) / sxx)
  intercept = float(y.mean() - slope * x.mean())
  residual = y - intercept - slope * x
  if clusters is None:
    se, df, groups = float(np.sqrt(np.sum(residual ** 2) / (n - 2) / sxx)), n - 2, n
  else:
    labels, inverse = np.unique(np.asarray(clusters), return_inverse=True)
    groups = len(labels)
    scores = np.bincount(inverse, weights=dx * residual, minlength=groups)  # [G] sum of (x - mean x) e per cluster
    correction = groups / (groups - 1) * (n - 1) / (n - 2)
    se, df = float(np.sqrt(correction * np.sum(scores ** 2)) / sxx), groups - 1
  half = float(scipy.stats.t.ppf((1 + confidence) / 2, df)) * se
  return {'slope': slope, 'intercept': intercept, 'se': se, 'low': slope - half, 'high': slope + half, 'n': n,
          'groups': groups}


def flip_response(true: np.ndarray, predicted: np.ndarray, predicted_flipped: np.ndarray,
                  image_index: np.ndarray) -> dict:
  """[M, 4] true boxes and the boxes predicted on the images and on the flipped images ([M] image of each pair) ->
  the flip's reading: 'follow' (slope_fit of the predicted x shift on the shift 1 - 2 x_true a learned location
  gives, clustered by image), 'mirror' (the same on 1 - 2 x_predicted: whether the model mirrors its own answer, right
  or wrong), the mean |shift| of the predicted x and of the truth, the mean signed shifts, the mean |shift| of the
  predicted y (which the flip leaves unchanged in the truth) and the fraction of pairs whose predicted x moved."""
  x_true = box_centres(true)[:, 0]
  before, after = box_centres(predicted), box_centres(predicted_flipped)
  expected = 1 - 2 * x_true  # the true centre's shift: (1 - x) - x
  shift = after[:, 0] - before[:, 0]
  return {'follow': slope_fit(expected, shift, image_index),
          'mirror': slope_fit(1 - 2 * before[:, 0], shift, image_index),
          'abs_shift': float(np.mean(np.abs(shift))), 'expected_abs_shift': float(np.mean(np.abs(expected))),
          'mean_shift': float(np.mean(shift)), 'expected_mean_shift': float(np.mean(expected)),
          'abs_shift_y': float(np.mean(np.abs(after[:, 1] - before[:, 1]))),
          'moved_fraction': float(np.mean(shift != 0))}


def quantised(boxes: np.ndarray, bins: int) -> np.ndarray:
  """[M, 4] boxes rounded to the centres of `bins` coordinate bins per axis, as the decoder's targets are."""
  return locca_tasks.dequantize_box(locca_tasks.quantize_box(boxes, bins), bins)


def summary(true: np.ndarray, predicted: np.ndarray, predicted_flipped: np.ndarray, image_index: np.ndarray) -> dict:
  """One run's Part 1 reading on [M] pairs: the centre slopes (x, y; clustered by image), the flip, and the
  evaluator's scores on the images and on the flipped images (against the mirrored truth)."""
  true_c, predicted_c = box_centres(true), box_centres(predicted)
  return {'slope_x': slope_fit(true_c[:, 0], predicted_c[:, 0], image_index),
          'slope_y': slope_fit(true_c[:, 1], predicted_c[:, 1], image_index),
          'flip': flip_response(true, predicted, predicted_flipped, image_index),
          **referring.box_scores(predicted, true, 'decoder'),
          **{f'{k}_flipped': v for k, v in referring.box_scores(predicted_flipped, flipped_boxes(true),
                                                                 'decoder').items()}}


# ------------------------------------------------------------------------------------------ training and predicting


def trained(work: str, name: str, seed: int, store: str, eval_every: int = 0, need_checkpoint: bool = False) -> dict:
  """The runner's row of run `name` (trained by lab/runner.py `train` unless `store` holds it; a run with `after`
  starts from that run's workdir); with `need_checkpoint`, its checkpoint too, trained again where the row is stored
  but the workdir is gone (the same command)."""
  began = time.time()
  row = runner.train(work, name, seed, None, eval_every, store)
  if need_checkpoint and not runner.has_checkpoint(runner.run_dir(work, name, seed)):
    runner.train(work, name, seed, None, eval_every)
  print(f'{name} seed {seed}: {row["wall_seconds"]:.0f} s when trained ({time.time() - began:.0f} s now)', flush=True)
  return row


def decoder_predictions(workdir: str) -> dict:
  """The decoder's boxes of the run in `workdir` (its latest checkpoint) on its config's held-out split: every region
  of every image, predicted as the referring evaluator predicts them, on the images and on the images flipped left
  to right -> {'image_index' [M], 'texts' [M], 'true' [M, 4], 'bins', 'predicted' [M, 4], 'predicted_flipped'
  [M, 4] (coordinate bins), 'step', 'split'}."""
  checkpoint = resolve_checkpoint(workdir)
  config = load_config(checkpoint)
  params, model_state = load_variables(checkpoint)
  params = in_layout(params, BlockStack.from_config(config.model))
  model = models.build_model(config.model)
  variables = objectives.build(config, model).eval_variants(params, model_state)['']  # with the decoder's vocabulary
  mesh = parallel.make_mesh()
  encoder = Encoder(model, parallel.replicated_from_host(variables, mesh), mesh, config.eval.batch_size,
                    config.model.text.context_length)
  eval_set = evalsets.load_eval_set('synthetic', config.data, config.eval.split, config.model.vision.image_size,
                                    preprocessing=image_ops.preprocessing_of(config.model))
  image_index, true, texts = referring.region_pairs(eval_set.regions)
  decoder_params = jax.device_get(encoder.variables['params'][locca.PARAMS_NAME])
  text_ids = referring.decoder_text_ids(encoder.variables)
  bins = referring.trained_decoder(encoder, decoder_params, text_ids)[1].box_bins
  boxes = {key: referring.decoder_boxes(encoder, decoder_params, images, image_index, texts, text_ids)
           for key, images in (('predicted', eval_set.images), ('predicted_flipped', flipped_images(eval_set.images)))}
  return {'image_index': image_index, 'texts': texts, 'true': true, 'bins': bins, 'split': config.eval.split,
          'step': int(os.path.basename(checkpoint)) if os.path.basename(checkpoint).isdigit() else None,
          **{key: locca_tasks.quantize_box(value, bins) for key, value in boxes.items()}}


def probe_path(out: str, name: str, seed: int) -> str:
  return os.path.join(out, 'probe', f'{name}_seed{seed}.json')


def write_json(path: str, value) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.tmp', 'w') as f:
    json.dump(value, f)
  os.replace(path + '.tmp', path)


def read_json(path: str):
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def probe_one(work: str, out: str, name: str, seed: int, store: str) -> str:
  """Run `name` seed `seed` (trained when missing) through `decoder_predictions`, unless its file is stored; the
  held-out pairs go once into probe/test_pairs.json, and every run's must be those."""
  path = probe_path(out, name, seed)
  if os.path.exists(path):
    return path
  trained(work, name, seed, store, need_checkpoint=True)
  began = time.time()
  found = decoder_predictions(runner.run_dir(work, name, seed))
  pairs = {'split': found['split'], 'image_index': found['image_index'].tolist(), 'texts': found['texts'],
           'true': np.round(found['true'].astype(np.float64), 6).tolist()}
  pairs_path = os.path.join(out, 'probe', 'test_pairs.json')
  stored = read_json(pairs_path)
  if stored is None:
    write_json(pairs_path, pairs)
  elif stored != json.loads(json.dumps(pairs)):
    raise ValueError(f'{name} seed {seed}: its held-out pairs differ from {pairs_path}')
  write_json(path, {'run': name, 'seed': seed, 'step': found['step'], 'bins': found['bins'],
                    'predicted': found['predicted'].tolist(), 'predicted_flipped': found['predicted_flipped'].tolist(),
                    'seconds': round(time.time() - began, 1)})
  return path


def run_probe(work: str, out: str, seeds=PROBE_SEEDS) -> None:
  for seed in seeds:  # seed by seed, so that a part is readable early
    for name in PROBE_RUNS:
      print(name, seed, probe_one(work, out, name, seed, os.path.join(out, 'runs')), flush=True)


def run_decoder(work: str, out: str, seeds=DECODER_SEEDS) -> None:
  store = os.path.join(out, 'runs')
  for seed in seeds:
    missing = [name for name in DECODER_RUNS if runner.stored_row(store, name, seed) is None]
    trained(work, TOWERS, seed, store, need_checkpoint=bool(missing))
    for name in DECODER_RUNS:
      trained(work, name, seed, store, DECODER_EVAL_EVERY)
      if not os.path.exists(probe_path(out, name, seed)) and runner.has_checkpoint(runner.run_dir(work, name, seed)):
        probe_one(work, out, name, seed, store)  # description: Part 1's reading of these decoders


# ------------------------------------------------------------------------------------------ reading


def stored_summary(out: str, name: str, seed: int) -> dict | None:
  """`summary` of a stored probe file, or None where it is not there."""
  found, pairs = read_json(probe_path(out, name, seed)), read_json(os.path.join(out, 'probe', 'test_pairs.json'))
  if found is None or pairs is None:
    return None
  boxes = {key: locca_tasks.dequantize_box(np.asarray(found[key]), found['bins'])
           for key in ('predicted', 'predicted_flipped')}
  return summary(np.asarray(pairs['true']), boxes['predicted'], boxes['predicted_flipped'],
                 np.asarray(pairs['image_index']))


def interval(fit: dict) -> str:
  return f"{fit['slope']:+.3f} [{fit['low']:+.3f}, {fit['high']:+.3f}]"


def paired_line(label: str, differences: list[float]) -> str:
  if len(differences) < 2:
    return f'  {label}: {len(differences)} paired seed(s), no interval'
  mean, low, high = paired_interval(differences)
  reading = 'excludes zero' if low > 0 or high < 0 else 'holds zero: not distinguishable'
  return (f'  {label}: per seed {", ".join(f"{d:+.4f}" for d in differences)}; mean {mean:+.4f} '
          f'[{low:+.4f}, {high:+.4f}] ({len(differences) - 1} df; {reading})')


def read_probe(out: str, names=PROBE_RUNS, seeds=PROBE_SEEDS, title: str = 'Part 1') -> dict:
  pairs = read_json(os.path.join(out, 'probe', 'test_pairs.json'))
  if pairs is None:
    print(f'{title}: nothing stored yet')
    return {}
  words = sum(any(w in text.split() for w in POSITION_WORDS) for text in pairs['texts'])
  true = np.asarray(pairs['true'])
  print(f"\n{title}: {len(pairs['texts'])} referring pairs of {len(set(pairs['image_index']))} held-out images "
        f"({pairs['split']}); descriptions with 'left' or 'right': {words}")
  for bins in sorted({read_json(probe_path(out, n, s))['bins'] for n in names for s in seeds
                      if os.path.exists(probe_path(out, n, s))}):
    scores = referring.box_scores(quantised(true, bins), true, 'ceiling')
    print(f'  quantisation ceiling at {bins} bins: Acc@0.5 {scores["referring_ceiling_acc50"]:.3f}, '
          f'mIoU {scores["referring_ceiling_miou"]:.3f}')
  print('  slopes: 95% intervals clustered by image; follow = slope of the predicted x shift under the flip on the '
        "truth's (1 - 2x); mirror = the same on the model's own (1 - 2 x_pred)")
  print(f'  {"run":32s} seed {"slope x":>24s} {"slope y":>24s} {"flip: follow":>24s} {"mirror":>8s} '
        f'{"|dx|":>6s} {"|1-2x|":>6s} {"|dy|":>6s} {"moved":>6s} {"acc50":>6s} {"flipped":>7s} {"mIoU":>6s}')
  found = {}
  for name in names:
    for seed in seeds:
      s = stored_summary(out, name, seed)
      if s is None:
        print(f'  {name:32s} {seed:4d}  (not run)')
        continue
      found[name, seed] = s
      f = s['flip']
      print(f"  {name:32s} {seed:4d} {interval(s['slope_x']):>24s} {interval(s['slope_y']):>24s} "
            f"{interval(f['follow']):>24s} {f['mirror']['slope']:+8.3f} {f['abs_shift']:6.3f} "
            f"{f['expected_abs_shift']:6.3f} {f['abs_shift_y']:6.3f} {f['moved_fraction']:6.3f} "
            f"{s['referring_decoder_acc50']:6.3f} {s['referring_decoder_acc50_flipped']:7.3f} "
            f"{s['referring_decoder_miou']:6.3f}")
  print('  description only: the seeds\' paired differences (true - shuffled)')
  true_run, shuffled_run = names
  common = [k for k in seeds if (true_run, k) in found and (shuffled_run, k) in found]
  for label, get in (('slope x', lambda s: s['slope_x']['slope']), ('slope y', lambda s: s['slope_y']['slope']),
                     ('flip follow', lambda s: s['flip']['follow']['slope'])):
    print(paired_line(label, [get(found[true_run, k]) - get(found[shuffled_run, k]) for k in common]))
  for name in names:  # pooled over the seeds: description only
    fits = [found[name, k] for k in seeds if (name, k) in found]
    if fits:
      print(f"  pooled {name}: mean slope x {np.mean([s['slope_x']['slope'] for s in fits]):+.3f}, "
            f"mean follow {np.mean([s['flip']['follow']['slope'] for s in fits]):+.3f} over {len(fits)} seeds")
  return found


def read_decoder(out: str) -> dict:
  store = os.path.join(out, 'runs')
  rows = {(n, k): runner.stored_row(store, n, k) for n in (*DECODER_RUNS, TOWERS) for k in DECODER_SEEDS}
  print(f'\nPart 2: the decoder alone on the frozen towers of {TOWERS}, step {1600}; held-out split')
  print(f'  {"run":32s} seed {"Acc@0.5":>8s} {"mIoU":>7s} {"mean box":>8s} {"probe":>7s} {"zero-shot":>9s} '
        f'{"towers zero-shot":>17s} {"wall s":>7s}')
  for name in DECODER_RUNS:
    for seed in DECODER_SEEDS:
      row, towers = rows[name, seed], rows[TOWERS, seed]
      if row is None:
        print(f'  {name:32s} {seed:4d}  (not run)')
        continue
      base = towers.get('synthetic/zeroshot_top1') if towers else float('nan')
      print(f"  {name:32s} {seed:4d} {row[METRICS[0]]:8.4f} {row[METRICS[1]]:7.4f} "
            f"{row['synthetic/referring_chance_acc50']:8.4f} {row['synthetic/referring_probe_acc50']:7.4f} "
            f"{row['synthetic/zeroshot_top1']:9.4f} {base:17.4f} {row['wall_seconds']:7.0f}")
  true_run, shuffled_run = DECODER_RUNS
  common = [k for k in DECODER_SEEDS if rows[true_run, k] and rows[shuffled_run, k]]
  print('  the declared reading: true - shuffled, per seed and the mean with its 95% t-interval')
  for key in METRICS:
    print(paired_line(key.split('/')[1], [rows[true_run, k][key] - rows[shuffled_run, k][key] for k in common]))
  read_probe(out, DECODER_RUNS, DECODER_SEEDS, 'Part 2, description: Part 1\'s reading of these decoders')
  return rows


def plot(out: str, probe: dict, rows: dict) -> str:
  """Left: Part 1's slopes (x and the flip's follow) per seed with their intervals, true and shuffled boxes side by
  side. Right: Part 2's referring Acc@0.5 against step, each seed, true and shuffled boxes, with the mean box."""
  figure = Figure(figsize=(12, 4.5))
  left, right = figure.subplots(1, 2)
  colours = dict(zip(PROBE_RUNS + DECODER_RUNS, ('C0', 'C3', 'C0', 'C3')))
  for i, (label, get) in enumerate((('slope x', lambda s: s['slope_x']), ('slope y', lambda s: s['slope_y']),
                                    ('flip follow', lambda s: s['flip']['follow']))):
    for j, name in enumerate(PROBE_RUNS):
      for seed in PROBE_SEEDS:
        if (name, seed) not in probe:
          continue
        fit = get(probe[name, seed])
        at = i + (j - 0.5) * 0.35 + (seed - 1) * 0.07
        left.errorbar(at, fit['slope'], yerr=[[fit['slope'] - fit['low']], [fit['high'] - fit['slope']]], fmt='o',
                      color=colours[name], ms=4, label=name if i == 0 and seed == 0 else None)
  left.axhline(1, color='k', lw=0.8, ls='--')
  left.axhline(0, color='k', lw=0.8)
  left.set_xticks(range(3), ['centre x on true x', 'centre y on true y', 'x shift on 1 - 2x (flip)'])
  left.set_ylabel('slope (95% interval, clustered by image)')
  left.set_title('Part 1: siglip2 (400 steps), seeds 0-2', fontsize=10)
  if left.get_legend_handles_labels()[0]:
    left.legend(fontsize=8)
  chance = None
  for name in DECODER_RUNS:
    for seed in DECODER_SEEDS:
      row = rows.get((name, seed))
      if not row:
        continue
      points = [(e['step'], e['metrics'][METRICS[0]]) for e in row.get('evaluations', []) if METRICS[0] in e['metrics']]
      right.plot(*zip(*points), marker='o', color=colours[name], ls='-' if seed == 0 else ':',
                 label=f'{name} seed {seed}')
      chance = row['synthetic/referring_chance_acc50']
  if chance is not None:
    right.axhline(chance, color='k', lw=0.8, ls='--', label='mean box')
  right.set_xlabel('step')
  right.set_ylabel('referring Acc@0.5 (held-out)')
  right.set_title(f'Part 2: decoder alone on frozen {TOWERS} towers, 8 bins', fontsize=10)
  if right.get_legend_handles_labels()[0]:
    right.legend(fontsize=7)
  figure.tight_layout()
  path = os.path.join(out, 'boxes.png')
  os.makedirs(out, exist_ok=True)
  figure.savefig(path, dpi=110)
  return path


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--read', action='store_true', help='only read the stored rows')
  parser.add_argument('--part', choices=('probe', 'decoder', 'all'), default='all')
  parser.add_argument('--workdir', default=WORKDIR, help='the runs\' workdirs (checkpoints)')
  parser.add_argument('--probe_seeds', default=','.join(map(str, PROBE_SEEDS)))
  args = parser.parse_args()
  os.environ.setdefault('VLP_JAX_CACHE', os.path.join(args.workdir, 'data'))  # the embedded dataset, generated once
  if not args.read:
    if args.part in ('probe', 'all'):
      run_probe(args.workdir, OUT, tuple(int(s) for s in args.probe_seeds.split(',')))
    if args.part in ('decoder', 'all'):
      run_decoder(args.workdir, OUT)
  probe = read_probe(OUT)
  rows = read_decoder(OUT)
  print(f'\nPlot: {plot(OUT, probe, rows)}')


if __name__ == '__main__':
  main()
