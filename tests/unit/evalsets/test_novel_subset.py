"""The embedded dataset's novel subset (synthetic_novel, synthetic_long_novel): the held-out examples that share
neither an exact short caption nor a scene layout with any train example, checked against the decoded records."""
import re

import numpy as np
import pytest

from vlp_jax import evalsets, evaluation
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.evalsets import budget
from vlp_jax.evalsets.synthetic import novel_subset

# One sentence of a 'full' long caption per object: 'There is a small blue star at the top left.'
OBJECT_SENTENCE = re.compile(r'There is an? (large|medium|small) (\w+) (\w+) (?:at the ([a-z ]+)|in the (center))\.')


def _described_layout(long_caption: str) -> tuple:
  """The layout a record's full long caption spells out, read from its text alone: sorted (colour, shape, size,
  cell) per object."""
  objects = [(color, shape, size, cell or center)
             for size, color, shape, cell, center in OBJECT_SENTENCE.findall(long_caption)]
  assert objects, long_caption
  return tuple(sorted(objects))


def _records(micro, split):
  assert micro.data.synthetic.long_captions == 'full'  # what _described_layout reads
  root = synthetic.ensure_dataset(synthetic.spec_from_config(micro.data), micro.data.cache_dir)
  return pipeline.read_all(synthetic.shard_paths(root, split, tuple(micro.data.synthetic.sources)))


def test_scene_layout_is_the_layout_each_record_describes(micro):
  """scene_layout draws the scene without rendering it; its layout is the one the written record's long caption
  names, object for object."""
  for split in ('train', 'test'):
    for record in _records(micro, split):
      source, _, index = record['key'].split('/')
      layout = synthetic.scene_layout(micro.data.synthetic.seed, split, source, int(index))
      assert layout == _described_layout(record['long_caption']), record['key']


def test_novel_subset_shares_no_caption_and_no_layout_with_any_train_example(micro):
  train, test = _records(micro, 'train'), _records(micro, 'test')
  train_captions = [r['caption'] for r in train]
  train_layouts = [_described_layout(r['long_caption']) for r in train]
  caption_seen = [r['caption'] in train_captions for r in test]
  layout_seen = [_described_layout(r['long_caption']) in train_layouts for r in test]
  want = {r['key'] for r, c, l in zip(test, caption_seen, layout_seen) if not (c or l)}
  # Each rule excludes examples the other lets through, so dropping either changes the subset.
  assert any(c and not l for c, l in zip(caption_seen, layout_seen))
  assert any(l and not c for c, l in zip(caption_seen, layout_seen))
  subset = novel_subset(synthetic.spec_from_config(micro.data), 'test', micro.data.cache_dir)
  assert subset.keys == want and 0 < len(want) < len(test) == subset.total
  assert subset.caption_seen == pytest.approx(np.mean(caption_seen))
  assert subset.layout_seen == pytest.approx(np.mean(layout_seen))
  for record in test:  # pair by pair, for the examples it keeps
    if record['key'] in subset.keys:
      assert all(record['caption'] != other['caption'] for other in train)
      assert all(_described_layout(record['long_caption']) != layout for layout in train_layouts)


def test_an_example_that_repeats_a_train_caption_or_layout_is_left_out(micro):
  train = _records(micro, 'train')
  train_captions = [r['caption'] for r in train]
  train_layouts = [_described_layout(r['long_caption']) for r in train]
  # two large objects: a layout no scene has
  unseen_layout = (('red', 'circle', 'large', 'center'), ('red', 'circle', 'large', 'top'))
  unseen_caption = 'a caption no source writes'
  captions = [train_captions[5], unseen_caption, unseen_caption]
  layouts = [unseen_layout, train_layouts[7], unseen_layout]
  caption_seen, layout_seen = synthetic.seen_in_train(train_captions, train_layouts, captions, layouts)
  np.testing.assert_array_equal(caption_seen, [True, False, False])
  np.testing.assert_array_equal(layout_seen, [False, True, False])
  with pytest.raises(ValueError, match='one layout per caption'):
    synthetic.seen_in_train(train_captions, train_layouts, captions, layouts[:2])


class _HashEncoder:
  """Fixed features without a model: images by a random projection of their pixels, texts by a vector per distinct
  text."""

  def __init__(self, dim=16):
    self.rng, self.dim, self.table = np.random.default_rng(0), dim, {}

  def images(self, images):
    flat = np.asarray(images, np.float32).reshape(len(images), -1)
    return flat @ np.random.default_rng(1).normal(size=(flat.shape[1], self.dim)).astype(np.float32)

  def texts(self, captions):
    return np.stack([self.table.setdefault(c, self.rng.normal(size=self.dim).astype(np.float32)) for c in captions])


def test_novel_sets_are_the_full_sets_restricted_and_evaluate_alike(micro, capsys):
  novel_subset.cache_clear()
  novel = evalsets.load_eval_set('synthetic_novel', micro.data, 'test', 16, linear_probe=True)
  novel_long = evalsets.load_eval_set('synthetic_long_novel', micro.data, 'test', 16)
  full = evalsets.load_eval_set('synthetic', micro.data, 'test', 16, linear_probe=True)
  full_long = evalsets.load_eval_set('synthetic_long', micro.data, 'test', 16)
  spec = synthetic.spec_from_config(micro.data)
  keys = novel_subset(spec, 'test', micro.data.cache_dir).keys
  total = micro.data.synthetic.num_test * len(micro.data.synthetic.sources)
  assert capsys.readouterr().out.count(f'{len(keys)} of {total} test examples share neither') == 1  # printed once
  rows = [k for k, r in enumerate(_records(micro, 'test')) if r['key'] in keys]
  assert len(novel.captions) == len(rows) == len(keys) < len(full.captions)
  np.testing.assert_array_equal(novel.images, full.images[rows])
  np.testing.assert_array_equal(novel.labels, full.labels[rows])
  np.testing.assert_array_equal(novel.masks, full.masks[rows])
  assert novel.captions == [full.captions[k] for k in rows]
  assert novel.hard_negatives == [full.hard_negatives[k] for k in rows]
  assert novel_long.captions == [full_long.captions[k] for k in rows]
  np.testing.assert_array_equal(novel.train_images, full.train_images)  # the probe fits on the same examples
  applies = lambda s: [t for t in evaluation.EVALUATORS if evaluation.EVALUATORS.get(t).applies(s)]  # noqa: E731
  assert applies(novel) == applies(full) and applies(novel_long) == applies(full_long)
  metrics = evaluation.run_evaluations(_HashEncoder(), [novel, novel_long],
                                       ('zeroshot', 'retrieval', 'compositional'))
  for key in ('zeroshot_top1', 'i2t_r1', 't2i_r1', 'compositional_acc'):
    assert 0 <= metrics[f'eval/synthetic_novel/{key}'] <= 1, key
  assert 0 <= metrics['eval/synthetic_long_novel/i2t_r1'] <= 1


def test_the_memory_estimate_bounds_the_novel_sets_as_loaded(micro):
  """evalsets/budget.py counts a novel set as the set it restricts: its probe exactly, its images as an upper bound."""
  micro.eval.tasks = ('zeroshot', 'linear_probe')
  micro.data.probe_train_examples = 30
  for name in ('synthetic_novel', 'synthetic_long_novel'):
    micro.eval.datasets = (name,)
    loaded = evalsets.load_eval_sets(micro)[0]
    cost = budget.set_cost(name, micro)
    total = micro.data.synthetic.num_test * len(micro.data.synthetic.sources)
    assert cost.name == name and len(loaded.images) < cost.images == total
    assert cost.probe_images == (0 if loaded.train_images is None else len(loaded.train_images))
    assert cost.held_bytes >= loaded.images.nbytes + (0 if loaded.train_images is None else
                                                       loaded.train_images.nbytes)
  assert budget.set_cost('synthetic_novel', micro).probe_images == 30
