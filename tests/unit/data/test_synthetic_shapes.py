"""The embedded dataset: deterministic, split-separated, and consistent between images, masks and captions."""
import collections
import dataclasses
import hashlib
import json
import os
import re

import numpy as np
import pytest

from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.text import text_crops
from vlp_jax.data.text.clip_bpe import default_tokenizer


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
  later = ('captions', 'long_captions', 'regions', 'shuffle_regions')  # fields added after the digest was fixed
  fields = {k: v for k, v in dataclasses.asdict(spec).items() if k not in later}
  payload = json.dumps({**fields, 'version': synthetic.FORMAT_VERSION}, sort_keys=True)
  assert spec.digest() == hashlib.sha256(payload.encode()).hexdigest()[:12]
  assert synthetic.SyntheticSpec(captions='detailed').digest() != spec.digest()


def test_digests_of_specs_from_before_the_long_caption_field_are_unchanged():
  """The digests name existing caches (and results): a field added later leaves them as they were at its default."""
  assert synthetic.SyntheticSpec().digest() == 'edd5a33c5599'
  assert synthetic.SyntheticSpec(captions='detailed').digest() == '5400104c4e5e'
  assert synthetic.SyntheticSpec(seed=3, captions='colour_only').digest() == '45b7700ea00d'
  assert synthetic.SyntheticSpec(long_captions='full').digest() == 'edd5a33c5599'
  compact = {synthetic.SyntheticSpec(long_captions='compact').digest(),
             synthetic.SyntheticSpec(captions='detailed', long_captions='compact').digest()}
  assert len(compact) == 2 and not compact & {'edd5a33c5599', '5400104c4e5e'}


def test_default_examples_keep_their_text():
  """Everything but the PNG bytes (which depend on the encoder's version) of the default examples, as generated before
  the long caption forms existed."""
  texts = [{k: v for k, v in synthetic.make_example(0, split, source, i, 8).items() if k not in ('image', 'mask')}
           for split in synthetic.SPLITS for source in synthetic.SOURCES for i in range(10)]
  assert hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()[:16] == '0616e3238102d069'


def test_unknown_caption_style_is_rejected(tmp_path):
  with pytest.raises(ValueError, match="caption style 'verbose'.*detailed"):
    synthetic.ensure_dataset(synthetic.SyntheticSpec(captions='verbose'), str(tmp_path))


def test_unknown_long_caption_form_is_rejected(tmp_path):
  with pytest.raises(ValueError, match="long caption form 'short'.*compact"):
    synthetic.ensure_dataset(synthetic.SyntheticSpec(long_captions='short'), str(tmp_path))


def _object(color, shape, size, position):
  cx, cy = synthetic.POSITIONS[position]
  return synthetic.SceneObject(color, shape, size, position, (cx, cy), 0.1)


def test_every_compact_long_caption_fits_the_context():
  """The longest sentence of each kind, over every colour, shape, size, position, relation and background, summed for
  three objects (BPE ids do not cross a sentence boundary: '.' and ' ' end a pre-token), fits in
  COMPACT_MAX_TOKENS with sot and eot."""
  encode = default_tokenizer().encode
  cells = {'to the left of': 'left', 'to the right of': 'right', 'above': 'top', 'below': 'bottom'}
  main_sentence, other_sentence, background_sentence = 0, 0, 0
  for color in synthetic.COLOR_NAMES:
    for shape in synthetic.SHAPES:
      for position in synthetic.POSITIONS:
        caption = synthetic.compact_long_caption([_object(color, shape, 'large', position)], 'white')
        main_sentence = max(main_sentence, len(encode(text_crops.split_sentences(caption)[0])))
      main = _object(color, shape, 'large', 'center')
      for relation, position in cells.items():
        for size in ('medium', 'small'):
          for other in synthetic.CLASS_NAMES:
            obj = _object(*other.split(), size, position)
            assert synthetic.relation(obj, main) == relation
            caption = synthetic.compact_long_caption([main, obj], 'white')
            other_sentence = max(other_sentence, len(encode(text_crops.split_sentences(caption)[1])))
  for background in (*synthetic.STUDIO_BACKGROUNDS, 'a noisy gradient', 'paper with a grid'):
    caption = synthetic.compact_long_caption([_object('red', 'star', 'large', 'top')], background)
    background_sentence = max(background_sentence, len(encode(text_crops.split_sentences(caption)[-1])))
  longest = main_sentence + 2 * other_sentence + background_sentence
  assert longest + 2 <= synthetic.COMPACT_MAX_TOKENS, (main_sentence, other_sentence, background_sentence)
  assert longest + 2 > 24  # a bound that says something: the full form takes up to 67


def test_generated_compact_long_captions_fit_and_split_into_sentences():
  tokenize = default_tokenizer()
  for source in synthetic.SOURCES:
    examples = [synthetic.make_example(0, 'train', source, i, 8, long_captions='compact') for i in range(150)]
    captions = [e['long_caption'] for e in examples]
    lengths = [len(tokenize.encode(c)) + 2 for c in captions]
    assert max(lengths) <= synthetic.COMPACT_MAX_TOKENS
    rows = tokenize(captions, context_length=synthetic.COMPACT_MAX_TOKENS)
    for row, caption in zip(rows, captions):  # nothing cut: the tokens decode to the whole caption
      assert tokenize.decode(row).strip().lower().replace(' .', '.') == caption.lower(), caption
    full = [len(tokenize.encode(synthetic.make_example(0, 'train', source, i, 8)['long_caption'])) + 2
            for i in range(150)]
    assert max(full) > synthetic.COMPACT_MAX_TOKENS  # the default form does not fit: why the compact one exists


def test_compact_long_captions_say_what_the_full_ones_say_and_change_nothing_else():
  """One sentence per object and one for the background; the main object's size and cell, every other object's
  size and its relation to the main one, and the background, as the full caption has them."""
  for source in synthetic.SOURCES:
    for index in range(40):
      full = synthetic.make_example(0, 'val', source, index, 16)
      compact = synthetic.make_example(0, 'val', source, index, 16, long_captions='compact')
      assert {k: v for k, v in full.items() if k != 'long_caption'} == \
             {k: v for k, v in compact.items() if k != 'long_caption'}
      objects = re.findall(r'There is an? (\w+) (\w+ \w+) (?:at the|in the) ([\w ]+?)\.', full['long_caption'])
      relations = re.findall(r'The (\w+ \w+) is ([\w ]+?) the (\w+ \w+)\.', full['long_caption'])
      background = re.search(r'The background is ([\w ]+)\.', full['long_caption']).group(1)
      sentences = text_crops.split_sentences(compact['long_caption'])
      assert len(sentences) == len(objects) + 1, compact['long_caption']
      (size, name, position), *others = objects
      assert sentences[0].lower() == f'{size} {name} ' + ('in the center.' if position == 'center'
                                                          else f'at the {position}.')
      for sentence, (size, name, _), (rel_name, rel, main_name) in zip(sentences[1:], others, relations):
        assert rel_name == name and main_name == objects[0][1]
        assert sentence.lower() == f'{size} {name} {rel.removeprefix("to the ")} the {main_name}.'
      assert sentences[-1].lower() == f'{synthetic.COMPACT_BACKGROUNDS.get(background, background)} background.'


def test_regions_lie_on_their_objects():
  """Each region's box holds every pixel of its object (to a pixel) and, for the object drawn last (which nothing
  hides), fits them closely; its text names that object's colour and shape."""
  resolution, last_ious = 32, []
  for source in synthetic.SOURCES:
    for index in range(12):
      example = synthetic.make_example(0, 'train', source, index, resolution, regions=True)
      mask = records.decode_mask(example['mask'])
      regions = records.decode_regions(example['regions'])
      labels = [synthetic.class_label(*text.split()[1:]) for text in regions.texts]
      for k, (box, label) in enumerate(zip(regions.boxes * resolution, labels)):
        if labels.count(label) > 1:
          continue  # two objects of one class share their mask value
        rows, cols = np.nonzero(mask == label + 1)
        assert len(rows), (source, index, k)
        assert cols.min() >= box[0] - 1 and cols.max() + 1 <= box[2] + 1, (source, index, k, box, cols)
        assert rows.min() >= box[1] - 1 and rows.max() + 1 <= box[3] + 1, (source, index, k, box, rows)
        if k == len(labels) - 1:
          pixels = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
          inner = np.prod(np.clip(np.minimum(box[2:], pixels[2:]) - np.maximum(box[:2], pixels[:2]), 0, None))
          area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
          last_ious.append(inner / (area(box) + area(pixels) - inner))
  assert min(last_ious) > 0.6, sorted(last_ious)[:5]


def test_regions_change_no_other_field_nor_the_default_cache():
  for source in synthetic.SOURCES:
    plain = synthetic.make_example(0, 'val', source, 4, 16)
    with_regions = synthetic.make_example(0, 'val', source, 4, 16, regions=True)
    assert {k: v for k, v in with_regions.items() if k != 'regions'} == plain
    assert len(with_regions['regions']) == plain['long_caption'].count('There is')  # one per object
    decoded = pipeline.DecodeRecord().map(records.serialize(with_regions))['regions']
    assert decoded.boxes.shape == (len(with_regions['regions']), 4)
    colours = synthetic.make_example(0, 'val', source, 4, 16, captions='colour_only', regions=True)['regions']
    assert all(r['text'].endswith(f' {synthetic.UNNAMED_SHAPE}') for r in colours)
  assert synthetic.SyntheticSpec(regions=False).digest() == 'edd5a33c5599'
  assert synthetic.SyntheticSpec(regions=True).digest() != 'edd5a33c5599'
