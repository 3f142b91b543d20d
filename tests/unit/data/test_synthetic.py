"""The embedded dataset: deterministic, split-separated, and consistent between images, masks and captions."""
import collections
import dataclasses
import hashlib
import json
import os
import re

import numpy as np
import pytest

from vlp_jax.data import pipeline, records, synthetic


def test_examples_are_deterministic_per_seed_split_source_index():
  a = synthetic.make_example(3, 'train', 'web', 17, 24)
  b = synthetic.make_example(3, 'train', 'web', 17, 24)
  assert a == b
  assert synthetic.make_example(4, 'train', 'web', 17, 24)['image'] != a['image']
  assert synthetic.make_example(3, 'test', 'web', 17, 24)['image'] != a['image']
  assert synthetic.make_example(3, 'train', 'web', 18, 24)['image'] != a['image']


def test_generated_shards_are_identical_across_runs(tmp_path):
  spec = synthetic.SyntheticSpec(seed=1, resolution=16, num_train=20, num_val=4, num_test=6, shards=2)
  first = synthetic.ensure_dataset(spec, str(tmp_path / 'a'), verbose=False)
  second = synthetic.ensure_dataset(spec, str(tmp_path / 'b'), verbose=False)
  for split in synthetic.SPLITS:
    paths_a = synthetic.shard_paths(first, split, spec.sources)
    paths_b = synthetic.shard_paths(second, split, spec.sources)
    assert len(paths_a) == 2 * len(spec.sources)
    assert [records.serialize(e) for e in pipeline.read_all(paths_a)] == \
           [records.serialize(e) for e in pipeline.read_all(paths_b)]
  # A second call reuses the cache and leaves no temporary directories behind.
  assert synthetic.ensure_dataset(spec, str(tmp_path / 'a'), verbose=False) == first
  assert [d for d in os.listdir(tmp_path / 'a') if d.startswith('.')] == []
  other = synthetic.ensure_dataset(synthetic.SyntheticSpec(seed=2, resolution=16, num_train=20, num_val=4,
                                                           num_test=6), str(tmp_path / 'a'), verbose=False)
  assert other != first


def test_splits_hold_different_images(tmp_path):
  spec = synthetic.SyntheticSpec(resolution=16, num_train=50, num_val=20, num_test=20, sources=('studio',))
  root = synthetic.ensure_dataset(spec, str(tmp_path), verbose=False)
  images = {split: {e['image'] for e in pipeline.read_all(synthetic.shard_paths(root, split, spec.sources))}
            for split in synthetic.SPLITS}
  assert not images['train'] & images['test'] and not images['train'] & images['val']


@pytest.mark.parametrize('source', synthetic.SOURCES)
def test_labels_masks_and_captions_agree(source):
  for index in range(30):
    example = synthetic.make_example(0, 'val', source, index, 32)
    name = synthetic.CLASS_NAMES[example['label']]
    mask = records.decode_mask(example['mask'])
    image = records.decode_image(example['image'])
    assert image.shape == (32, 32, 3) and mask.shape == (32, 32)
    assert example['label'] + 1 in np.unique(mask)  # the labelled (largest) object is drawn
    assert name in example['long_caption']
    assert example['long_caption'].count('.') >= 2  # an object sentence and a background sentence at least
    assert example['canonical_caption'].split(' ', 1)[1].startswith(name)
    assert example['hard_negatives'] and example['canonical_caption'] not in example['hard_negatives']
    if source != 'web':  # web alt-text is sometimes wrong or unrelated by design
      assert name in example['caption']


def test_sources_differ_in_style():
  mean_color = {s: np.mean([records.decode_image(synthetic.make_example(0, 'train', s, i, 32)['image']).std()
                            for i in range(20)]) for s in synthetic.SOURCES}
  assert len({round(v) for v in mean_color.values()}) == 3
  web = [synthetic.make_example(0, 'train', 'web', i, 16)['caption'] for i in range(200)]
  noisy = [c for c in web if not any(color in c for color in synthetic.COLOR_NAMES)]
  assert 0.02 < len(noisy) / len(web) < 0.3  # some alt-text is unrelated to the image


def test_unknown_source_is_rejected(tmp_path):
  with pytest.raises(ValueError, match='valid choices'):
    synthetic.ensure_dataset(synthetic.SyntheticSpec(sources=('cartoon',)), str(tmp_path))


def test_detailed_captions_name_every_object_and_change_nothing_else():
  for source in synthetic.SOURCES:
    for index in range(40):
      alt = synthetic.make_example(0, 'train', source, index, 16)
      detailed = synthetic.make_example(0, 'train', source, index, 16, captions='detailed')
      assert {k: v for k, v in alt.items() if k != 'caption'} == {k: v for k, v in detailed.items() if k != 'caption'}
      if source == 'web' and not any(c in detailed['caption'] for c in synthetic.COLOR_NAMES):
        continue  # unrelated alt-text by design
      objects = re.findall(r'There is an? (\w+) (\w+) (\w+)', detailed['long_caption'])
      assert objects
      for size, color, shape in objects:
        assert f'{size} ' in detailed['caption'] and f' {shape}' in detailed['caption'], (source, detailed)


def test_detailed_captions_repeat_less_inside_a_source_and_keep_its_phrasing():
  for source in ('web', 'sketch'):
    alt = [synthetic.make_example(0, 'train', source, i, 8)['caption'] for i in range(300)]
    detailed = [synthetic.make_example(0, 'train', source, i, 8, captions='detailed')['caption'] for i in range(300)]
    repeated = lambda captions: sum(n for n in collections.Counter(captions).values() if n > 1)  # noqa: E731
    assert repeated(detailed) < repeated(alt) / 2, (source, repeated(detailed), repeated(alt))
  sketch = [synthetic.make_example(0, 'train', 'sketch', i, 8, captions='detailed')['caption'] for i in range(50)]
  assert all(('drawing' in c) or ('sketch' in c) or ('doodle' in c) for c in sketch)


def test_colour_only_captions_are_the_alt_text_without_its_shapes():
  for source in synthetic.SOURCES:
    for index in range(40):
      alt = synthetic.make_example(0, 'train', source, index, 16)
      colours = synthetic.make_example(0, 'train', source, index, 16, captions='colour_only')
      assert {k: v for k, v in alt.items() if k != 'caption'} == {k: v for k, v in colours.items() if k != 'caption'}
      assert not set(re.findall(r'\w+', colours['caption'])) & set(synthetic.SHAPES), colours['caption']
      # The same draws: putting the shape words back gives the alt-text (shapes are named in the scene's order).
      shapes = [s for s in re.findall(r'\w+', alt['caption']) if s in synthetic.SHAPES]
      restored = colours['caption']
      for shape in shapes:
        restored = re.sub(rf'\b{synthetic.UNNAMED_SHAPE}\b', shape, restored, count=1)
      assert restored == alt['caption'], (alt['caption'], colours['caption'])


def test_default_caption_style_keeps_the_cache_digest():
  spec = synthetic.SyntheticSpec()
  fields = {k: v for k, v in dataclasses.asdict(spec).items() if k != 'captions'}
  payload = json.dumps({**fields, 'version': synthetic.FORMAT_VERSION}, sort_keys=True)
  assert spec.digest() == hashlib.sha256(payload.encode()).hexdigest()[:12]
  assert synthetic.SyntheticSpec(captions='detailed').digest() != spec.digest()


def test_unknown_caption_style_is_rejected(tmp_path):
  with pytest.raises(ValueError, match="caption style 'verbose'.*detailed"):
    synthetic.ensure_dataset(synthetic.SyntheticSpec(captions='verbose'), str(tmp_path))
