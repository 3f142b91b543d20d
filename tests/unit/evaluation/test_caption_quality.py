"""Captioning quality (evaluation/captioning.py): CIDEr-D against a naive transcription of the paper's formula,
its fixed points, greedy decoding of a forced decoder, the decoder's ids back to text, and the evaluator run from
config.eval.tasks on the embedded dataset (a model without a decoder gets nothing)."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import micro_config
from vlp_jax import evalsets, models, objectives, parallel
from vlp_jax.config import validate
from vlp_jax.data.text import locca_tasks
from vlp_jax.evaluation import captioning, run_evaluations
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.objectives.base import tower_variables


def naive_cider_d(candidates, references, orders=4, sigma=6.0):
  """Vedantam et al. 2015, eq. 2-5 with CIDEr-D's clipping and length penalty, as dense vectors over every n-gram
  of the corpus: g_k(s) = h_k(s) log(|I| / max(1, #images whose references hold w_k)); length = bigram count."""
  def grams(text, n):
    words = text.lower().replace(',', ' ').replace('.', ' ').split()
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
  scores = []
  for candidate, refs in zip(candidates, references):
    per_order = []
    for n in range(1, orders + 1):
      vocabulary = sorted({g for text in [candidate, *itertools.chain(*references)] for g in grams(text, n)})
      df = np.array([sum(any(g in grams(r, n) for r in rs) for rs in references) for g in vocabulary], float)
      idf = np.log(len(references)) - np.log(np.maximum(df, 1.0))

      def vector(text):
        return np.array([grams(text, n).count(g) for g in vocabulary], float) * idf
      c = vector(candidate)
      sims = []
      for r in refs:
        v = vector(r)
        norm = np.linalg.norm(c) * np.linalg.norm(v)
        overlap = np.minimum(c, v) @ v / (norm if norm else 1.0)
        delta = len(grams(candidate, 2)) - len(grams(r, 2))
        sims.append(overlap * math.exp(-delta ** 2 / (2 * sigma ** 2)))
      per_order.append(np.mean(sims))
    scores.append(10.0 * np.mean(per_order))
  return np.array(scores)


CANDIDATES = ['a red circle above a blue square', 'a green triangle', 'red circle, red circle red circle',
              'two small blue squares on the left']
REFERENCES = [['a red circle above a blue square', 'a red circle over a square'],
              ['a green triangle near a yellow star'],
              ['a red circle', 'one red circle in the middle', 'a circle'],
              ['a blue square on the left', 'two blue squares', 'small squares, blue']]


def test_cider_d_equals_a_naive_transcription_of_the_paper():
  np.testing.assert_allclose(captioning.cider_d(CANDIDATES, REFERENCES), naive_cider_d(CANDIDATES, REFERENCES),
                             rtol=1e-12)


def test_cider_d_fixed_points_and_invariances():
  refs = [['a big red circle'], ['a small blue square'], ['two green stars here']]
  # a candidate equal to its only reference scores 10 (cosine 1 for each order, no length penalty); one sharing no
  # word with it scores 0; case and punctuation do not count
  np.testing.assert_allclose(captioning.cider_d(['A big red circle.', 'a small blue square', 'yellow'], refs),
                             [10, 10, 0])
  # three words have no 4-gram: that order scores 0, so the same caption of three words scores 7.5
  np.testing.assert_allclose(captioning.cider_d(['a red circle', 'b'], [['a red circle'], ['c']]), [7.5, 0])
  # each image's score depends on the others only through the document frequencies: any order of images gives the same
  order = [2, 0, 3, 1]
  np.testing.assert_allclose(captioning.cider_d([CANDIDATES[i] for i in order], [REFERENCES[i] for i in order]),
                             captioning.cider_d(CANDIDATES, REFERENCES)[order], rtol=1e-12)
  # the length penalty: the right words with more after them score less
  padded = captioning.cider_d(['a big red circle', 'a big red circle with many more words in it', 'x'],
                              [['a big red circle'], ['a big red circle'], ['two green stars here']])
  assert padded[0] == pytest.approx(10.0) and 0 < padded[1] < 5
  with pytest.raises(ValueError, match='reference'):
    captioning.cider_d(['a'], [[]])


def test_exact_match_compares_words():
  assert captioning.exact_matches(['A red circle.', 'a red', 'b'], [['a red circle'], ['a red circle'], ['c', 'b']]
                                  ).tolist() == [True, False, True]


def test_greedy_decoding_of_a_forced_decoder_never_writes_a_forbidden_id():
  """Logits that prefer id (input + 1) mod 6 at each position, and id 0 (padding, forbidden) above all."""
  allowed = jnp.array([False, True, True, True, True, True])

  def logits_fn(ids):
    return 5.0 * jax.nn.one_hot((ids + 1) % 6, 6) + 10.0 * jax.nn.one_hot(jnp.zeros_like(ids), 6)
  inputs = jnp.array([[1, 0, 0, 0, 0, 0, 0], [4, 3, 3, 3, 3, 3, 3]])
  ids = np.asarray(jax.jit(captioning.greedy_caption_ids, static_argnums=0)(logits_fn, inputs, allowed))
  # from 1: 2 3 4 5, then (5 + 1) % 6 = 0 is forbidden, so the best allowed id, the lowest of the ties: 1
  np.testing.assert_array_equal(ids, [[1, 2, 3, 4, 5, 1, 2], [4, 5, 1, 2, 3, 4, 5]])


def test_caption_text_stops_at_the_end_id_and_maps_the_decoders_own_ids():
  layout = locca_tasks.LoccaLayout(text_vocab_size=5, eos_id=3, pad_id=0, box_bins=8, length=12, text_ids=(0, 2, 5, 9))
  decode = lambda ids: ' '.join(map(str, ids))  # noqa: E731
  # decoder ids 1 ('2'), UNK 4 (dropped), 2 ('5'), then the end id 3: what follows is not read
  assert captioning.caption_text(np.array([1, 4, 2, 3, 1, 1]), layout, decode) == '2 5'
  assert captioning.caption_text(np.array([2, 2]), layout, decode) == '5 5'  # no end id: all of it
  plain = locca_tasks.LoccaLayout(text_vocab_size=10, eos_id=9, pad_id=0, box_bins=8, length=12)
  assert captioning.caption_text(np.array([7, 8, 9, 1]), plain, decode) == '7 8'


def test_references_group_captions_by_image():
  assert captioning.image_references(['a', 'b', 'c'], np.array([2, 0, 2]), 4) == [['b'], [], ['a', 'c'], []]


@pytest.mark.slow
def test_runs_from_config_eval_tasks_on_the_embedded_dataset(data_cache):
  """A micro SigLIP 2 with the decoder, evaluated as the loop does: CIDEr-D and exact match with their chance levels;
  the same evaluator on a model without a decoder writes nothing."""
  config = micro_config(data_cache)
  config.data.synthetic.regions = True
  config.objective.update(name='siglip2', distill_weight=0.0, masked_weight=0.0, decoder_weight=1.0,
                          decoder_box_bins=8, decoder_vocabulary='train_texts')
  config.eval.tasks = ('captioning',)
  validate(config)
  (eval_set,) = evalsets.load_eval_sets(config)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jax.jit(objective.init_variables)(jax.random.key(0))
  (variables,) = objective.eval_variants(params, state).values()  # with the decoder's text ids
  encoder = Encoder(objective.model, variables, parallel.make_mesh(), batch_size=32)
  results = run_evaluations(encoder, [eval_set], config.eval.tasks)
  names = ('captioning_cider', 'captioning_exact')
  assert sorted(results) == sorted(f'eval/synthetic/{n}{s}' for n in names for s in ('', '_chance'))
  assert results['eval/synthetic/captioning_cider_chance'] > 0  # the most frequent caption is some image's
  assert all(value >= 0 for value in results.values())
  assert all(results[f'eval/synthetic/{n}'] <= 1 for n in ('captioning_exact', 'captioning_exact_chance'))
  config.objective.update(name='siglip')
  plain = objectives.build(config, models.build_model(config.model))
  params, state = jax.jit(plain.init_variables)(jax.random.key(0))
  encoder = Encoder(plain.model, tower_variables(params, state), parallel.make_mesh(), batch_size=32)
  assert run_evaluations(encoder, [eval_set], config.eval.tasks) == {}
