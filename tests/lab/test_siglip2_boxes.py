"""Issue 64, SigLIP 2's boxes (lab/diagnostics/siglip2_boxes.py, lab/experiments/siglip2_boxes_decoder.py): the centre
regression and the flip against naive numpy computations on constructed predictions, the flip of images and boxes
against each other, the experiment's configs (built, validated, differing only in the boxes, started from
siglip_compute's checkpoint by the runner) and, on a micro config, that training moves the decoder and nothing else."""
import importlib.util
import json
import os

import chex
import jax
import numpy as np
import pytest
import scipy.stats

from support import ROOT, compiled_step, initial_state, micro_config
from lab import catalogue, runner
from lab.diagnostics import siglip2_boxes as boxes
from vlp_jax import objectives, parallel
from vlp_jax.config import from_file, validate
from vlp_jax.data.loading.pipeline import DecodeRecord
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.objectives.siglip2 import DECODER

EXPERIMENT = os.path.join(ROOT, 'lab', 'experiments', 'siglip2_boxes_decoder.py')


def _experiment_module():
  spec = importlib.util.spec_from_file_location('siglip2_boxes_decoder', EXPERIMENT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# ------------------------------------------------------------------------------ naive references


def naive_slope(x, y):
  """(slope, classical se, CR1 se clustered by nothing) written out term by term."""
  n = len(x)
  mx, my = sum(x) / n, sum(y) / n
  sxx = sum((xi - mx) ** 2 for xi in x)
  b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y)) / sxx
  a = my - b * mx
  rss = sum((yi - a - b * xi) ** 2 for xi, yi in zip(x, y))
  return b, a, (rss / (n - 2) / sxx) ** 0.5


def naive_clustered_se(x, y, clusters):
  """CR1: the sandwich over clusters with the small-sample factor G/(G-1) (n-1)/(n-2), by loops."""
  b, a, _ = naive_slope(x, y)
  n, mx = len(x), sum(x) / len(x)
  sxx = sum((xi - mx) ** 2 for xi in x)
  groups = sorted(set(clusters))
  meat = 0.0
  for g in groups:
    score = sum((x[i] - mx) * (y[i] - a - b * x[i]) for i in range(n) if clusters[i] == g)
    meat += score ** 2
  factor = len(groups) / (len(groups) - 1) * (n - 1) / (n - 2)
  return (factor * meat) ** 0.5 / sxx


def _true_boxes(rng, m):
  centre = rng.uniform(0.15, 0.85, (m, 2))
  half = rng.uniform(0.05, 0.15, (m, 2))
  return np.concatenate([centre - half, centre + half], axis=1)


def _centre_box(centre_x, centre_y, half=0.1):
  return np.stack([centre_x - half, centre_y - half, centre_x + half, centre_y + half], axis=1)


# ------------------------------------------------------------------------------ the arithmetic


def test_slope_and_its_intervals_match_a_naive_least_squares():
  rng = np.random.default_rng(0)
  x = rng.uniform(0, 1, 60)
  clusters = np.repeat(np.arange(20), 3)
  y = 0.2 + 0.7 * x + rng.normal(0, 0.1, 60) + np.repeat(rng.normal(0, 0.1, 20), 3)  # a shared error per cluster
  b, a, se = naive_slope(list(x), list(y))
  plain = boxes.slope_fit(x, y)
  assert plain['slope'] == pytest.approx(b, rel=1e-12) and plain['intercept'] == pytest.approx(a, rel=1e-12)
  assert plain['slope'] == pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-10)
  assert plain['se'] == pytest.approx(se, rel=1e-10)
  t = scipy.stats.t.ppf(0.975, 58)
  assert (plain['low'], plain['high']) == pytest.approx((b - t * se, b + t * se), rel=1e-10)
  clustered = boxes.slope_fit(x, y, clusters)
  assert clustered['slope'] == pytest.approx(b, rel=1e-12) and clustered['groups'] == 20
  cse = naive_clustered_se(list(x), list(y), list(clusters))
  assert clustered['se'] == pytest.approx(cse, rel=1e-10)
  t = scipy.stats.t.ppf(0.975, 19)
  assert (clustered['low'], clustered['high']) == pytest.approx((b - t * cse, b + t * cse), rel=1e-10)
  # relabelling the clusters changes nothing; an interval widens with the confidence
  assert boxes.slope_fit(x, y, 100 - clusters)['se'] == pytest.approx(cse, rel=1e-12)
  assert boxes.slope_fit(x, y, clusters, 0.99)['high'] > clustered['high']


def test_a_copied_location_has_slope_1_and_a_constant_box_slope_0():
  rng = np.random.default_rng(1)
  true = _true_boxes(rng, 40)
  image = np.arange(40) // 2
  learned = boxes.summary(true, true, boxes.flipped_boxes(true), image)
  for key in ('slope_x', 'slope_y'):
    assert learned[key]['slope'] == pytest.approx(1.0) and learned[key]['se'] == pytest.approx(0.0, abs=1e-9)
  assert learned['referring_decoder_acc50'] == 1.0 and learned['referring_decoder_acc50_flipped'] == 1.0
  constant = np.broadcast_to(true.mean(axis=0), true.shape)
  prior = boxes.summary(true, constant, constant, image)
  assert prior['slope_x']['slope'] == pytest.approx(0.0, abs=1e-12)
  assert prior['flip']['follow']['slope'] == pytest.approx(0.0, abs=1e-12) and prior['flip']['abs_shift'] == 0.0
  assert prior['flip']['moved_fraction'] == 0.0
  assert np.isnan(prior['flip']['mirror']['slope'])  # a constant answer has no own position to mirror


def test_flip_response_matches_a_naive_computation_on_constructed_predictions():
  """Three constructed models on the same pairs: one that follows the flip, a prior that ignores the image, and one
  whose x moves half as far as the truth's; the figures against loops over the pairs."""
  rng = np.random.default_rng(2)
  true = _true_boxes(rng, 30)
  image = np.arange(30) // 3
  x_true = [(b[0] + b[2]) / 2 for b in true]
  expected = [1 - 2 * x for x in x_true]
  predicted = _centre_box(np.array(x_true) + rng.normal(0, 0.05, 30), rng.uniform(0.2, 0.8, 30))
  px = [(b[0] + b[2]) / 2 for b in predicted]
  for follows in (1.0, 0.0, 0.5):
    flipped = predicted.copy()
    flipped[:, [0, 2]] += follows * np.array(expected)[:, None]  # the x shift: `follows` of the truth's
    got = boxes.flip_response(true, predicted, flipped, image)
    shift = [(f[0] + f[2]) / 2 - (p[0] + p[2]) / 2 for f, p in zip(flipped, predicted)]
    assert got['abs_shift'] == pytest.approx(sum(abs(s) for s in shift) / 30)
    assert got['abs_shift'] == pytest.approx(follows * sum(abs(e) for e in expected) / 30)
    assert got['expected_abs_shift'] == pytest.approx(sum(abs(e) for e in expected) / 30)
    assert got['mean_shift'] == pytest.approx(sum(shift) / 30, abs=1e-12)
    assert got['expected_mean_shift'] == pytest.approx(sum(expected) / 30)
    assert got['follow']['slope'] == pytest.approx(follows, abs=1e-9)
    assert got['follow']['slope'] == pytest.approx(naive_slope(expected, shift)[0], abs=1e-9)
    mirror = [1 - 2 * x for x in px]
    assert got['mirror']['slope'] == pytest.approx(naive_slope(mirror, shift)[0], abs=1e-9)
    assert got['abs_shift_y'] == 0.0
    assert got['moved_fraction'] == (1.0 if follows else 0.0)


def test_flipping_the_images_moves_each_object_to_the_flipped_box():
  """A rectangle drawn at a box (fractions of the side; pixel j covers [j/S, (j+1)/S)) is found, once the image is
  flipped, exactly at flipped_boxes of its box."""
  size = 32
  images = np.zeros((2, size, size, 3), np.float32)
  drawn = np.array([[3, 5, 10, 20], [20, 1, 31, 9]])  # pixel columns x0..x1-1, rows y0..y1-1
  for image, (x0, y0, x1, y1) in zip(images, drawn):
    image[y0:y1, x0:x1] = 1.0
  flipped = boxes.flipped_images(images)
  assert flipped.shape == images.shape and flipped.flags['C_CONTIGUOUS']
  np.testing.assert_array_equal(boxes.flipped_images(flipped), images)  # an involution
  for image, box in zip(flipped, drawn / size):
    rows, cols = np.nonzero(image[..., 0])
    found = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]) / size
    np.testing.assert_allclose(found, boxes.flipped_boxes(box[None])[0], atol=1e-12)
  np.testing.assert_allclose(boxes.flipped_boxes(boxes.flipped_boxes(drawn / size)), drawn / size)
  np.testing.assert_allclose(boxes.box_centres(boxes.flipped_boxes(drawn / size))[:, 0],
                             1 - boxes.box_centres(drawn / size)[:, 0])


def test_quantisation_rounds_to_bin_centres():
  got = boxes.quantised(np.array([[0.0, 0.13, 0.5, 1.0]]), 8)
  np.testing.assert_allclose(got, [[0.0625, 0.1875, 0.5625, 0.9375]])  # 0.13 * 8 = 1.04: bin 1


def test_a_stored_probe_is_not_run_again_and_its_rows_read_back(tmp_path, monkeypatch):
  rng = np.random.default_rng(3)
  true = _true_boxes(rng, 12)
  probe = tmp_path / 'probe'
  probe.mkdir()
  image = (np.arange(12) // 2).tolist()
  (probe / 'test_pairs.json').write_text(json.dumps({'split': 'test', 'image_index': image,
                                                     'texts': ['small red circle'] * 12, 'true': true.tolist()}))
  bins = 32
  stored = {'run': 'siglip2', 'seed': 0, 'step': 400, 'bins': bins,
            'predicted': boxes.locca_tasks.quantize_box(true, bins).tolist(),
            'predicted_flipped': boxes.locca_tasks.quantize_box(boxes.flipped_boxes(true), bins).tolist()}
  (probe / 'siglip2_seed0.json').write_text(json.dumps(stored))
  monkeypatch.setattr(runner, 'train', lambda *a, **k: pytest.fail('a stored probe was trained again'))
  assert boxes.probe_one(str(tmp_path / 'work'), str(tmp_path), 'siglip2', 0, '') == str(probe / 'siglip2_seed0.json')
  got = boxes.stored_summary(str(tmp_path), 'siglip2', 0)
  want = boxes.summary(true, boxes.quantised(true, bins), boxes.quantised(boxes.flipped_boxes(true), bins),
                       np.array(image))
  assert got['slope_x']['slope'] == pytest.approx(want['slope_x']['slope'])
  assert got['flip']['follow']['slope'] == pytest.approx(want['flip']['follow']['slope'])
  assert boxes.stored_summary(str(tmp_path), 'siglip2', 1) is None


# ------------------------------------------------------------------------------ the experiment's configs


def test_the_decoder_configs_validate_and_differ_only_in_the_boxes():
  module = _experiment_module()
  true, shuffled = (from_file(EXPERIMENT, v) for v in ('true', 'shuffled'))
  for config in (true, shuffled):
    assert config.objective.name == 'siglip2' and config.objective.decoder_tasks == ('aref',)
    assert config.objective.decoder_box_bins == 8 == module.BOX_BINS and config.total_steps == 1600
    assert config.objective.sigmoid_weight == 0.0 and config.objective.decoder_weight == 1.0
    assert config.objective.distill_weight == 0.0 and config.objective.masked_weight == 0.0
    assert config.optim.lock_image and config.optim.lock_text
    assert config.optim.lock_image_unlocked_groups == 0 and config.optim.lock_text_unlocked_layers == 0
    assert config.eval.tasks == ('referring', 'zeroshot') and config.eval.datasets == ('synthetic',)
    assert config.init.require_checkpoint
    config.init.checkpoint = '/w/siglip_compute/seed0'
    validate(config)
  assert not true.data.synthetic.shuffle_regions and shuffled.data.synthetic.shuffle_regions
  shuffled.data.synthetic.shuffle_regions = False
  assert true.to_json() == shuffled.to_json()
  # the recipe's model, data and optimizer: only the declared keys differ from configs/siglip2_shapes.py
  recipe = from_file(os.path.join(ROOT, 'configs', 'siglip2_shapes.py'))
  recipe.update_from_flattened_dict(module.DECODER_ALONE)
  recipe.init.checkpoint = true.init.checkpoint
  assert recipe.to_json() == true.to_json()
  # the towers' model is siglip_compute's, so that its checkpoint loads whole
  towers = from_file(os.path.join(ROOT, 'lab', 'experiments', 'siglip_compute.py'))
  assert towers.model.to_json() == true.model.to_json()
  with pytest.raises(ValueError, match='unknown variant'):
    from_file(EXPERIMENT, 'boxes')


def test_the_runner_starts_the_decoder_runs_from_siglip_computes_checkpoint():
  for name in boxes.DECODER_RUNS:
    assert catalogue.RUNS[name].after == boxes.TOWERS
    config = runner.run_config('/w', name, 1, None, boxes.DECODER_EVAL_EVERY)
    assert config.init.checkpoint == '/w/siglip_compute/seed1' and config.total_steps == 1600
    assert config.eval.every_steps == 400 and config.seed == 1
  assert [catalogue.load_config(n).data.synthetic.shuffle_regions for n in boxes.DECODER_RUNS] == [False, True]
  assert [catalogue.load_config(n).data.synthetic.shuffle_regions for n in boxes.PROBE_RUNS] == [False, True]


def _decoder_alone_micro(cache_dir):
  """The micro model with SigLIP 2's decoder, small late heads, the experiment's keys on it."""
  config = micro_config(cache_dir)
  config.objective.name = 'siglip2'
  config.objective.update(num_local_crops=2, local_crop_size=8, head_hidden_dim=16, head_bottleneck_dim=8,
                          head_prototypes=12, decoder_weight=1.0)
  config.data.synthetic.regions = True
  config.update_from_flattened_dict(_experiment_module().DECODER_ALONE)
  config.total_steps, config.batch_size = 6, 8
  return config


@pytest.mark.slow
def test_training_steps_move_the_decoder_and_nothing_else(data_cache):
  """On a micro config with the experiment's keys: after three steps the towers, the logit scale and the bias are the
  initial ones bit for bit, every decoder leaf has moved, and the loss is the decoder's alone."""
  config = _decoder_alone_micro(data_cache)
  views, decode = objectives.OBJECTIVES.get('siglip2').views(config), DecodeRecord()
  examples = [views.random_map(decode.map(records.serialize(
      synthetic.make_example(0, 'train', 'studio', i, 16, regions=True))), np.random.default_rng(i)) for i in range(8)]
  batch = {k: np.stack([e[k] for e in examples]) for k in examples[0]}
  assert batch['locca_inputs'].shape[1] == 1  # one task: aref
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  initial = initial_state(config)
  step, state = compiled_step(config, mesh, initial)
  # Three steps: the warm-up starts at a learning rate of 0, and the decoder's output layer starts at zero, so the
  # layers below it get their first gradient at the third step.
  for _ in range(3):
    state, metrics = step(state, parallel.global_batch(batch, mesh), jax.random.key(1))
  params, metrics = parallel.to_host(state.params), parallel.to_host(metrics)
  chex.assert_trees_all_equal({k: v for k, v in params.items() if k != DECODER},
                              {k: v for k, v in initial.params.items() if k != DECODER})
  moved = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(a != b)), params[DECODER], initial.params[DECODER]))
  assert all(moved), moved
  assert np.isfinite(metrics['siglip_loss']) and metrics['decoder_aref_loss'] > 0
  np.testing.assert_allclose(metrics['loss'], metrics['decoder_loss'], rtol=1e-6)
