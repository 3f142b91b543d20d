"""Referring expressions (evaluation/referring.py): IoU against boxes computed by hand, greedy decoding of a forced
decoder, the box probe on features that encode the boxes (and on features that do not), and the evaluator run from
config.eval.tasks on the embedded dataset with regions."""
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from support import micro_config
from vlp_jax import evalsets, models, objectives, parallel
from vlp_jax.config import validate
from vlp_jax.data.text import locca_tasks
from vlp_jax.data.storage.records import Regions
from vlp_jax.evaluation import EVALUATORS, run_evaluations, skipped_tasks
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.evaluation import referring
from vlp_jax.models import locca
from vlp_jax.objectives.base import tower_variables

# Text ids 0..9 (eos 9, pad 0), then CAP 10, AREF 11, GCAP 12, SEP 13, then coordinate bins 0..7 as ids 14..21.
LAYOUT = locca_tasks.LoccaLayout(text_vocab_size=10, eos_id=9, pad_id=0, box_bins=8, length=12)


class TinyTokenizer:
  """Ids 1..8 for the letters a..h, eos 9, pad 0: what referring.py reads of a tokenizer."""
  vocab_size, eot_token, pad_token = 10, 9, 0

  def encode(self, text):
    return [1 + 'abcdefgh'.index(c) for c in text if c in 'abcdefgh']


def test_iou_against_boxes_computed_by_hand():
  a = np.array([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 1.0, 1.0], [0.1, 0.1, 0.2, 0.2], [0.6, 0.2, 0.4, 0.5],
                [0.2, 0.2, 0.6, 0.6]])
  b = np.array([[0.25, 0.25, 0.75, 0.75], [0.0, 0.0, 0.5, 1.0], [0.5, 0.5, 0.9, 0.9], [0.0, 0.0, 1.0, 1.0],
                [0.2, 0.2, 0.6, 0.6]])
  # overlap 1/16 over 1/4 + 1/4 - 1/16; half of the unit square; disjoint; an empty (inverted) box; identical
  np.testing.assert_allclose(referring.box_iou(a, b), [1 / 7, 0.5, 0.0, 0.0, 1.0], atol=1e-12)
  np.testing.assert_allclose(referring.box_iou(b, a), referring.box_iou(a, b))
  assert referring.box_scores(a, b, 'x') == pytest.approx({'referring_x_acc50': 2 / 5,  # IoU 0.5 counts
                                                           'referring_x_miou': (1 / 7 + 0.5 + 1.0) / 5})


def test_pairs_list_every_region_of_every_image():
  regions = [Regions(np.array([[0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1]], np.float32), ('ab', 'cd')),
             Regions(np.zeros((0, 4), np.float32), ()),
             Regions(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32), ('e',))]
  image, boxes, texts = referring.region_pairs(regions)
  np.testing.assert_array_equal(image, [0, 0, 2])
  np.testing.assert_array_equal(boxes, np.concatenate([regions[0].boxes, regions[2].boxes]))
  assert texts == ['ab', 'cd', 'e']


def test_greedy_decoding_of_a_forced_decoder_gives_the_exact_box():
  """A decoder forced to answer: after a non-coordinate input, the coordinate bin its row starts at; after a
  coordinate input, the next bin. End-of-text always scores higher and must never be chosen."""
  texts = ['a', 'abcdef', 'hh', '']
  starts = jnp.array([0, 3, 4, 2])
  inputs, lengths = referring.aref_prefixes(texts, LAYOUT, TinyTokenizer().encode)
  np.testing.assert_array_equal(lengths, [3, 8, 4, 2])
  np.testing.assert_array_equal(inputs[0], [11, 1, 13] + [0] * 9)
  first, bins = LAYOUT.first_coordinate, LAYOUT.box_bins
  vocab = LAYOUT.output_vocab_size

  def logits_fn(ids):
    is_coordinate = ids >= first
    wanted = jnp.where(is_coordinate, first + (ids - first + 1) % bins, first + starts[:, None])
    return 5.0 * jax.nn.one_hot(wanted, vocab) + 10.0 * jax.nn.one_hot(jnp.full_like(ids, 9), vocab)
  chosen = np.asarray(jax.jit(referring.greedy_box_bins, static_argnums=(0, 3, 4))(
      logits_fn, jnp.asarray(inputs), jnp.asarray(lengths), first, bins))
  want = np.asarray(starts)[:, None] + np.arange(4)[None]
  np.testing.assert_array_equal(chosen, want)
  np.testing.assert_allclose(locca_tasks.dequantize_box(chosen, bins)[1], [3.5 / 8, 4.5 / 8, 5.5 / 8, 6.5 / 8])


def test_decoder_route_reads_the_decoder_from_its_parameters():
  """A real decoder whose output layer always prefers end-of-text, then coordinate bin 5: every pair (70, over two
  chunks) gets the box of bin 5 on every side."""
  text = ml_collections.ConfigDict({'width': 16, 'heads': 2, 'layers': 4})
  decoder = locca.decoder_for_text_tower(text, LAYOUT.output_vocab_size, LAYOUT.length, 'gelu', layers=1)
  shapes = jax.eval_shape(decoder.init, jax.random.key(0), jnp.zeros((1, 3, 8)), jnp.zeros((1, 12), jnp.int32))
  rng = np.random.default_rng(0)  # random weights of the decoder's shapes, without compiling its initialiser
  params = jax.tree.map(lambda x: jnp.asarray(0.3 * rng.normal(size=x.shape), x.dtype), shapes['params'])
  bias = np.zeros(LAYOUT.output_vocab_size, np.float32)
  bias[9], bias[LAYOUT.first_coordinate + 5] = 20.0, 10.0
  params = {**params, 'logits': {'kernel': jnp.zeros_like(params['logits']['kernel']), 'bias': jnp.asarray(bias)}}
  encoder = types.SimpleNamespace(model=types.SimpleNamespace(text=text, act='gelu', dtype=jnp.float32),
                                  tokenizer=TinyTokenizer(), image_tokens=lambda images: np.asarray(images))
  images = np.random.default_rng(0).normal(size=(5, 3, 8)).astype(np.float32)  # as image tokens [N, P, w]
  image_index = np.arange(70) % 5
  boxes = referring.decoder_boxes(encoder, params, images, image_index, ['abc'] * 70)
  np.testing.assert_allclose(boxes, np.full((70, 4), 5.5 / 8))
  assert locca.decoder_from_params(text, params, 'gelu').layers == 1  # its own depth, not half the tower's


def test_decoder_route_over_part_of_the_vocabulary_reads_the_text_ids_it_was_trained_with():
  """A decoder over TinyTokenizer's ids 2 and 5 ('b', 'e'), with its end 9 and padding 0: decoder text ids pad 0,
  'b' 1, 'e' 2, eos 3, UNK 4, then CAP 5 .. SEP 8, then the 8 bins from 9 (read off the decoder's width); a letter
  outside the vocabulary ('h') is UNK in the description."""
  tokenizer = TinyTokenizer()
  layout = referring.decoder_layout(tokenizer, locca.LoccaDecoder(16, 2, 1, vocab_size=5 + 4 + 8, length=12),
                                    text_ids=[0, 2, 5, 9])
  assert (layout.text_vocab_size, layout.first_coordinate, layout.box_bins, layout.eos_id) == (5, 9, 8, 3)
  inputs, lengths = referring.aref_prefixes(['b', 'e', 'h'], layout, tokenizer.encode)
  np.testing.assert_array_equal(inputs[:, :3], [[6, 1, 8], [6, 2, 8], [6, 4, 8]])  # [AREF] text [SEP]
  np.testing.assert_array_equal(lengths, [3, 3, 3])


def test_probe_recovers_boxes_from_features_that_linearly_encode_them():
  rng = np.random.default_rng(0)
  corner = rng.uniform(0.0, 0.6, (300, 2))
  boxes = np.concatenate([corner, corner + rng.uniform(0.1, 0.4, (300, 2))], axis=1)
  mixing = rng.normal(size=(4, 12))
  features = np.concatenate([boxes @ mixing + 0.001 * rng.normal(size=(300, 12)), rng.normal(size=(300, 5))], axis=1)
  predicted = referring.fit_box_probe(features[:200], boxes[:200], features[200:])
  scores = referring.box_scores(predicted, boxes[200:], 'probe')
  assert scores['referring_probe_acc50'] == 1.0 and scores['referring_probe_miou'] > 0.95
  # Features that say nothing of the boxes do no better than the mean box.
  noise = rng.normal(size=(300, 17))
  blind = referring.box_scores(referring.fit_box_probe(noise[:200], boxes[:200], noise[200:]), boxes[200:], 'probe')
  chance = referring.box_scores(np.broadcast_to(boxes[:200].mean(axis=0), (100, 4)), boxes[200:], 'chance')
  assert blind['referring_probe_miou'] < chance['referring_chance_miou'] + 0.05 < 0.6


@pytest.mark.slow
def test_runs_from_config_eval_tasks_on_the_embedded_dataset_with_regions(data_cache):
  """A micro SigLIP 2 with the decoder, evaluated as the loop does: the three routes, each a fraction; without
  regions in the data the task is skipped, by name."""
  config = micro_config(data_cache)
  config.data.synthetic.regions = True
  config.objective.update(name='siglip2', distill_weight=0.0, masked_weight=0.0, decoder_weight=1.0,
                          decoder_box_bins=8)
  config.eval.tasks = ('referring',)
  validate(config)
  assert 'referring' in EVALUATORS
  (eval_set,) = evalsets.load_eval_sets(config)
  assert len(eval_set.regions) == len(eval_set.images) and len(eval_set.train_regions) == len(eval_set.train_images)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jax.jit(objective.init_variables)(jax.random.key(0))
  encoder = Encoder(objective.model, tower_variables(params, state), parallel.make_mesh(), batch_size=32)
  results = run_evaluations(encoder, [eval_set], config.eval.tasks)
  routes = ('decoder', 'probe', 'chance')
  assert sorted(results) == sorted(f'eval/synthetic/referring_{r}_{m}' for r in routes for m in ('acc50', 'miou'))
  assert all(0.0 <= value <= 1.0 for value in results.values())
  assert results['eval/synthetic/referring_chance_miou'] > 0
  config.data.synthetic.regions = False
  (plain,) = evalsets.load_eval_sets(config)
  assert skipped_tasks([plain], ('referring',)) == ['synthetic: referring skipped (no regions)']
