"""The embedded dataset's eval sets: short captions (every task), long captions (retrieval and affinity only) and
the linear probe's fitting set from the train split."""
import numpy as np

from vlp_jax import evaluation
from vlp_jax import evalsets
from vlp_jax.evalsets.synthetic import SOURCE_SETS
from vlp_jax.data import sources
from vlp_jax.data import pipeline, synthetic


def test_long_caption_set_pairs_the_same_images_with_their_long_captions(micro):
  short = evalsets.load_eval_set('synthetic', micro.data, 'test', 16)
  long = evalsets.load_eval_set('synthetic_long', micro.data, 'test', 16)
  np.testing.assert_array_equal(long.images, short.images)
  root = synthetic.ensure_dataset(sources.synthetic_spec(micro.data), micro.data.cache_dir)
  records = pipeline.read_all(synthetic.shard_paths(root, 'test', tuple(micro.data.synthetic.sources)))
  assert long.captions == [r['long_caption'] for r in records]
  assert all(c.count('.') >= 2 for c in long.captions)  # multi-sentence
  tasks = [t for t in evaluation.EVALUATORS if evaluation.EVALUATORS.get(t).applies(long)]
  assert sorted(tasks) == ['affinity', 'retrieval']


def test_linear_probe_fits_on_a_balanced_slice_of_the_train_split(micro):
  micro.data.probe_train_examples = 30
  eval_set = evalsets.load_eval_set('synthetic', micro.data, 'test', 16, linear_probe=True)
  assert eval_set.train_images.shape == (30, 16, 16, 3) and eval_set.train_labels.shape == (30,)
  assert evaluation.EVALUATORS.get('linear_probe').applies(eval_set)
  root = synthetic.ensure_dataset(sources.synthetic_spec(micro.data), micro.data.cache_dir)
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
  assert sorted(applies) == ['affinity', 'retrieval']
  micro.data.synthetic.sources = ('studio',)
  try:
    evalsets.load_eval_set('synthetic_web', micro.data, 'test', 16)
  except ValueError as error:
    assert "needs the source 'web'" in str(error)
  else:
    raise AssertionError('a source outside config.data.synthetic.sources must be refused')
