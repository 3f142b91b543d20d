"""The embedded dataset's eval sets: short captions (every task), long captions (retrieval and affinity only) and
the linear probe's fitting set from the train split."""
import collections
import dataclasses

import numpy as np
import pytest

from vlp_jax import evaluation
from vlp_jax import evalsets
from vlp_jax.evalsets.synthetic import SOURCE_SETS
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.text.clip_bpe import default_tokenizer


def test_long_caption_set_pairs_the_same_images_with_their_long_captions(micro):
  short = evalsets.load_eval_set('synthetic', micro.data, 'test', 16)
  long = evalsets.load_eval_set('synthetic_long', micro.data, 'test', 16)
  np.testing.assert_array_equal(long.images, short.images)
  root = synthetic.ensure_dataset(synthetic.spec_from_config(micro.data), micro.data.cache_dir)
  records = pipeline.read_all(synthetic.shard_paths(root, 'test', tuple(micro.data.synthetic.sources)))
  assert long.captions == [r['long_caption'] for r in records]
  assert all(c.count('.') >= 2 for c in long.captions)  # multi-sentence
  tasks = [t for t in evaluation.EVALUATORS if evaluation.EVALUATORS.get(t).applies(long)]
  assert sorted(tasks) == ['affinity', 'captioning', 'retrieval']


def test_linear_probe_fits_on_a_balanced_slice_of_the_train_split(micro):
  micro.data.probe_train_examples = 30
  eval_set = evalsets.load_eval_set('synthetic', micro.data, 'test', 16, linear_probe=True)
  assert eval_set.train_images.shape == (30, 16, 16, 3) and eval_set.train_labels.shape == (30,)
  assert evaluation.EVALUATORS.get('linear_probe').applies(eval_set)
  root = synthetic.ensure_dataset(synthetic.spec_from_config(micro.data), micro.data.cache_dir)
  want = []
  for source in micro.data.synthetic.sources:  # 10 of each source, in order
    want += [r['label'] for r in pipeline.read_all(synthetic.shard_paths(root, 'train', (source,)))[:10]]
  np.testing.assert_array_equal(eval_set.train_labels, want)
  micro.data.probe_train_examples = 0  # all of it
  full = evalsets.load_eval_set('synthetic', micro.data, 'test', 16, linear_probe=True)
  assert len(full.train_labels) == micro.data.synthetic.num_train * len(micro.data.synthetic.sources)
  assert evalsets.load_eval_set('synthetic', micro.data, 'test', 16).train_images is None


def test_per_source_sets_split_the_test_split_by_source(micro):
  pooled = evalsets.load_eval_set('synthetic', micro.data, 'test', 16)
  parts = [evalsets.load_eval_set(name, micro.data, 'test', 16, linear_probe=True)
           for name in SOURCE_SETS]
  # the sources in the pooled set's order, each with its own captions and no probe of its own
  np.testing.assert_array_equal(np.concatenate([p.images for p in parts]), pooled.images)
  assert sum((p.captions for p in parts), []) == pooled.captions
  assert all(p.train_images is None for p in parts)
  applies = [t for t in evaluation.EVALUATORS if evaluation.EVALUATORS.get(t).applies(parts[0])]
  assert sorted(applies) == ['affinity', 'captioning', 'retrieval']
  micro.data.synthetic.sources = ('studio',)
  try:
    evalsets.load_eval_set('synthetic_web', micro.data, 'test', 16)
  except ValueError as error:
    assert "needs the source 'web'" in str(error)
  else:
    raise AssertionError('a source outside config.data.synthetic.sources must be refused')


class _TextTable:
  """A text encoder that gives every distinct text its own fixed direction: identical texts, identical embeddings."""

  def __init__(self, texts):
    self.index = {t: k for k, t in enumerate(sorted(set(texts)))}

  def texts(self, captions):
    return np.eye(len(self.index))[[self.index[c] for c in captions]]


def test_every_synthetic_set_counts_identical_caption_texts_as_a_match(micro):
  """With images embedded exactly as their captions, a model can do no better: every synthetic set scores it R@1 = 1
  in both directions, although its captions repeat (exact matching would lose every image whose caption repeats)."""
  for name in ('synthetic', 'synthetic_long', *SOURCE_SETS):
    eval_set = evalsets.load_eval_set(name, micro.data, 'test', 16)
    assert eval_set.identical_captions_match, name
    encoder = _TextTable(eval_set.captions)
    metrics = evaluation.EVALUATORS.get('retrieval').fn(encoder, eval_set, encoder.texts(eval_set.captions))
    assert metrics['i2t_r1'] == metrics['t2i_r1'] == 1.0, name
    repeats = len(eval_set.captions) - len(set(eval_set.captions))
    assert metrics['i2t_r1_chance'] >= 1 / len(eval_set.captions), name  # g / T for a caption shared g times
    if name == 'synthetic':
      assert repeats > 0  # the case the rule is for
      exact = evaluation.EVALUATORS.get('retrieval').fn(
          encoder, dataclasses.replace(eval_set, identical_captions_match=False), encoder.texts(eval_set.captions))
      assert exact['i2t_r1'] == pytest.approx(1 - sum(
          n for n in collections.Counter(eval_set.captions).values() if n > 1) / len(eval_set.captions))
      assert exact['i2t_r1_chance'] == pytest.approx(1 / len(eval_set.captions))
      assert metrics['i2t_r1_chance'] > exact['i2t_r1_chance']


def test_compact_long_captions_reach_the_long_caption_set(micro):
  """config.data.synthetic.long_captions picks the form synthetic_long reads; the images stay the same."""
  full = evalsets.load_eval_set('synthetic_long', micro.data, 'test', 16)
  micro.data.synthetic.long_captions = 'compact'
  compact = evalsets.load_eval_set('synthetic_long', micro.data, 'test', 16)
  np.testing.assert_array_equal(compact.images, full.images)
  tokenizer = default_tokenizer()
  assert max(len(tokenizer.encode(c)) + 2 for c in compact.captions) <= synthetic.COMPACT_MAX_TOKENS
  assert max(len(tokenizer.encode(c)) + 2 for c in full.captions) > synthetic.COMPACT_MAX_TOKENS
  assert all(c.endswith(' background.') for c in compact.captions)
