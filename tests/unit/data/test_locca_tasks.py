"""LocCa's task sequences (data/text/locca_tasks.py) and the records' regions (records.decode_regions)."""
import grain
import ml_collections
import numpy as np
import pytest

from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.text import locca_tasks
from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, SIGLIP_PREPROCESSING, TORCHVISION_CLIP_PREPROCESSING
from vlp_jax.data.storage.records import Regions
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.errors import ConfigError
from vlp_jax.objectives.siglip2 import Siglip2Views

# Text ids 0..9 (eos 9, pad 0), then CAP 10, AREF 11, GCAP 12, SEP 13, then coordinate bins 0..3 as ids 14..17.
LAYOUT = locca_tasks.LoccaLayout(text_vocab_size=10, eos_id=9, pad_id=0, box_bins=4, length=10)
BOX = np.array([0.1, 0.3, 0.6, 1.0])  # bins 0, 1, 2 and 3 (1.0 falls in the last bin): ids 14, 15, 16, 17


def test_vocabulary_layout():
  assert [LAYOUT.token(t) for t in locca_tasks.SPECIAL_TOKENS] == [10, 11, 12, 13]
  assert (LAYOUT.first_coordinate, LAYOUT.output_vocab_size, LAYOUT.mask_id, LAYOUT.input_vocab_size) == \
      (14, 18, 18, 19)
  assert locca_tasks.box_tokens(BOX, LAYOUT) == [14, 15, 16, 17]


def test_layout_over_a_tokenizer_keeps_its_end_and_padding_ids():
  tokenizer = default_tokenizer()
  layout = locca_tasks.tokenizer_layout(tokenizer, box_bins=8, length=20, loss_on_condition=False)
  assert (layout.text_vocab_size, layout.eos_id, layout.pad_id) == (tokenizer.vocab_size, tokenizer.eot_token,
                                                                   tokenizer.pad_token)
  assert (layout.box_bins, layout.length, layout.loss_on_condition) == (8, 20, False)
  assert layout.output_vocab_size == tokenizer.vocab_size + len(locca_tasks.SPECIAL_TOKENS) + 8


def test_layout_over_part_of_a_tokenizer_renumbers_its_ids_and_maps_the_rest_to_unk():
  tokenizer = default_tokenizer()
  red, circle = tokenizer.encode('red circle')
  layout = locca_tasks.tokenizer_layout(tokenizer, box_bins=8, length=20, text_ids=[circle, red, red])
  # Sorted, with the end and padding ids added; UNK after them, then the special and coordinate tokens.
  want = sorted({red, circle, tokenizer.eot_token, tokenizer.pad_token})
  assert layout.text_ids == tuple(want) and layout.text_vocab_size == len(want) + 1
  assert (layout.eos_id, layout.pad_id) == (want.index(tokenizer.eot_token), want.index(tokenizer.pad_token))
  assert layout.output_vocab_size == len(want) + 1 + len(locca_tasks.SPECIAL_TOKENS) + 8
  unk = len(want)
  assert layout.text(tokenizer.encode('a red circle')) == [unk, want.index(red), want.index(circle)]
  rows = locca_tasks.example_arrays('red square', None, np.random.default_rng(0), layout, tokenizer.encode, ('cap',))
  np.testing.assert_array_equal(rows['locca_targets'][0, :3], [want.index(red), unk, layout.eos_id])
  assert rows['locca_inputs'].max() < layout.output_vocab_size
  full = locca_tasks.tokenizer_layout(tokenizer, box_bins=8, length=20)
  assert full.text([red, circle]) == [red, circle] and full.text_ids == ()
  with pytest.raises(ValueError, match='ids of the tokenizer'):
    locca_tasks.tokenizer_layout(tokenizer, text_ids=[tokenizer.vocab_size])


def test_caption_rows():
  inputs, targets, mask = locca_tasks.teacher_forcing(*locca_tasks.caption_sequence([3, 4, 5], LAYOUT), LAYOUT)
  np.testing.assert_array_equal(inputs, [10, 3, 4, 5, 0, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(targets, [3, 4, 5, 9, 0, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(mask, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize('on_condition, expected_mask', [(True, [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]),
                                                         (False, [0, 0, 0, 1, 1, 1, 1, 1, 0, 0])])
def test_referring_expression_rows(on_condition, expected_mask):
  layout = locca_tasks.LoccaLayout(10, 9, 0, box_bins=4, length=10, loss_on_condition=on_condition)
  inputs, targets, mask = locca_tasks.teacher_forcing(*locca_tasks.aref_sequence([6, 7], BOX, layout), layout)
  np.testing.assert_array_equal(inputs, [11, 6, 7, 13, 14, 15, 16, 17, 0, 0])
  np.testing.assert_array_equal(targets, [6, 7, 13, 14, 15, 16, 17, 9, 0, 0])
  np.testing.assert_array_equal(mask, expected_mask)  # off: the box and the end only


@pytest.mark.parametrize('on_condition, expected_mask', [(True, [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]),
                                                         (False, [0, 0, 0, 0, 0, 1, 1, 1, 0, 0])])
def test_grounded_caption_rows(on_condition, expected_mask):
  layout = locca_tasks.LoccaLayout(10, 9, 0, box_bins=4, length=10, loss_on_condition=on_condition)
  inputs, targets, mask = locca_tasks.teacher_forcing(*locca_tasks.gcap_sequence(BOX, [6, 7], layout), layout)
  np.testing.assert_array_equal(inputs, [12, 14, 15, 16, 17, 13, 6, 7, 0, 0])
  np.testing.assert_array_equal(targets, [14, 15, 16, 17, 13, 6, 7, 9, 0, 0])
  np.testing.assert_array_equal(mask, expected_mask)  # off: the description and the end only


def test_long_texts_are_cut_so_that_the_box_and_the_end_fit():
  long_text = [1] * 30
  cap = locca_tasks.teacher_forcing(*locca_tasks.caption_sequence(long_text, LAYOUT), LAYOUT)
  assert cap[1][-1] == 9 and cap[2].sum() == LAYOUT.length
  inputs, targets, mask = locca_tasks.teacher_forcing(*locca_tasks.aref_sequence(long_text, BOX, LAYOUT), LAYOUT)
  np.testing.assert_array_equal(targets[-6:], [13, 14, 15, 16, 17, 9])
  assert mask.sum() == LAYOUT.length
  _, targets, _ = locca_tasks.teacher_forcing(*locca_tasks.gcap_sequence(BOX, long_text, LAYOUT), LAYOUT)
  np.testing.assert_array_equal(targets[:5], [14, 15, 16, 17, 13])
  assert targets[-1] == 9


def test_box_quantisation_round_trip():
  rng = np.random.default_rng(0)
  for bins in (4, 32, 500):
    boxes = np.sort(rng.random((200, 2, 2)), axis=1).reshape(200, 4)[:, [0, 2, 1, 3]]  # min <= max per axis
    boxes[:3] = [[0, 0, 1, 1], [0.5, 0.5, 0.5, 0.5], [1 / bins, 0, 1 - 1e-9, 1]]
    quantized = locca_tasks.quantize_box(boxes, bins)
    assert quantized.min() >= 0 and quantized.max() < bins
    assert np.abs(locca_tasks.dequantize_box(quantized, bins) - boxes).max() <= 0.5 / bins + 1e-6
    every_bin = np.arange(bins)
    np.testing.assert_array_equal(locca_tasks.quantize_box(locca_tasks.dequantize_box(every_bin, bins), bins),
                                  every_bin)
  layout = locca_tasks.LoccaLayout(10, 9, 0, box_bins=32, length=12)
  box = np.array([0.2, 0.25, 0.71, 0.9])
  assert np.abs(locca_tasks.tokens_to_box(locca_tasks.box_tokens(box, layout), layout) - box).max() <= 0.5 / 32
  assert locca_tasks.tokens_to_box([3, 14, 15, 16], layout) is None  # a text id is not a coordinate
  assert locca_tasks.tokens_to_box([14, 15, 16], layout) is None


def _encode(text: str) -> list[int]:
  """A toy tokenizer: a word's length (1..8) per word."""
  return [min(len(word), 8) for word in text.split()]


REGIONS = Regions(np.array([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.25, 0, 0.75, 1]], np.float32),
                  ('a', 'bb', 'ccc'))


def test_example_arrays_are_a_row_per_task_and_deterministic_in_the_rng():
  arrays = locca_tasks.example_arrays('xx yyy', REGIONS, np.random.default_rng(5), LAYOUT, _encode)
  again = locca_tasks.example_arrays('xx yyy', REGIONS, np.random.default_rng(5), LAYOUT, _encode)
  assert {k: v.shape for k, v in arrays.items()} == {'locca_inputs': (3, 10), 'locca_targets': (3, 10),
                                                     'locca_loss_mask': (3, 10), 'locca_parallel': (3,)}
  for key in arrays:
    np.testing.assert_array_equal(arrays[key], again[key])
  np.testing.assert_array_equal(arrays['locca_inputs'][0, :3], [10, 2, 3])
  np.testing.assert_array_equal(arrays['locca_inputs'][:, 0], [10, 11, 12])
  # Each region task reads one region, its box among the regions' boxes (and its text with it).
  for row, box_at in ((1, slice(3, 7)), (2, slice(1, 5))):  # [AREF, text, SEP, box ..], [GCAP, box, SEP, text ..]
    box = locca_tasks.tokens_to_box(arrays['locca_inputs'][row, box_at], LAYOUT)
    assert box is not None and np.abs(REGIONS.boxes - box).max(axis=1).min() <= 0.5 / LAYOUT.box_bins
  # The region draws use the rng: over seeds, every region is read.
  picked = {int(locca_tasks.example_arrays('x', REGIONS, np.random.default_rng(s), LAYOUT, _encode)
                ['locca_inputs'][1, 1]) for s in range(40)}
  assert picked == {1, 2, 3}


def test_without_regions_only_the_caption_trains():
  for regions in (None, Regions(np.zeros((0, 4), np.float32), ())):
    arrays = locca_tasks.example_arrays('xx yyy', regions, np.random.default_rng(0), LAYOUT, _encode)
    np.testing.assert_array_equal(arrays['locca_loss_mask'].sum(axis=1), [3, 0, 0])
  captions_only = locca_tasks.example_arrays('xx', REGIONS, np.random.default_rng(0), LAYOUT, _encode, tasks=('cap',))
  assert captions_only['locca_inputs'].shape == (1, 10)
  with pytest.raises(ConfigError, match='unknown or no LocCa tasks'):
    locca_tasks.example_arrays('xx', REGIONS, np.random.default_rng(0), LAYOUT, _encode, tasks=('caption',))


def test_parallel_prediction_is_drawn_for_caption_rows_only():
  flags = np.stack([locca_tasks.example_arrays('xx', REGIONS, np.random.default_rng(s), LAYOUT, _encode,
                                               parallel_prob=0.5)['locca_parallel'] for s in range(200)])
  assert not flags[:, 1:].any()
  assert 0.35 < flags[:, 0].mean() < 0.65
  never = locca_tasks.example_arrays('xx', REGIONS, np.random.default_rng(0), LAYOUT, _encode)
  assert not never['locca_parallel'].any()


def test_layout_rejects_unusable_settings():
  with pytest.raises(ConfigError, match='length 6 leaves no room'):
    locca_tasks.LoccaLayout(10, 9, 0, box_bins=4, length=6)
  with pytest.raises(ConfigError, match='box_bins'):
    locca_tasks.LoccaLayout(10, 9, 0, box_bins=1, length=10)


def test_decode_regions():
  regions = records.decode_regions([{'box': [0.1, 0.2, 0.3, 0.4], 'text': 'small red star'}])
  np.testing.assert_allclose(regions.boxes, [[0.1, 0.2, 0.3, 0.4]])
  assert regions.boxes.dtype == np.float32 and regions.texts == ('small red star',)
  assert records.decode_regions([]).boxes.shape == (0, 4)
  for bad, why in (({'box': [0.1, 0.2, 0.3]}, 'region 0'), ([{'box': [0.5, 0.2, 0.3, 0.4], 'text': 'a'}], 'min <= max'),
                   ([{'box': [0.1, 0.2, 0.3, 1.5], 'text': 'a'}], 'in \\[0, 1\\]'),
                   ([{'box': [0.1, 0.2, 0.3, 0.4], 'text': ' '}], "'text'"), ('boxes', 'must be a list')):
    with pytest.raises(records.BadRecordError, match=why) as error:
      records.decode_regions(bad if isinstance(bad, (list, str)) else [bad])
    assert error.value.reason == 'bad_regions'


def test_a_record_with_bad_regions_is_replaced_and_counted():
  good = synthetic.make_example(0, 'train', 'studio', 0, 16, regions=True)
  bad = {**synthetic.make_example(0, 'train', 'studio', 1, 16), 'regions': [{'box': [0.9, 0, 0.1, 1], 'text': 'x'}]}
  source = grain.MapDataset.source([(0, records.serialize(bad)), (0, records.serialize(good))])
  example = pipeline.LoadExamples(source, ['shard-0'])[0]
  assert example['record_error'] == 1 + records.SKIP_REASONS.index('bad_regions')
  assert example['key'] == good['key'] and 'region 0' in example['record_detail']
  assert example['regions'].texts == tuple(r['text'] for r in good['regions'])


# ------------------------------------------------------------------------------------------ box geometry (issue 61)

def _white_rectangle(height: int, width: int, square: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """A black [height, width] image with one white rectangle off the centre of its central square (`square`, what a
  centre crop keeps) or of the whole image, and the rectangle's box as fractions of the image (what a record
  stores)."""
  side_y, side_x = (min(height, width),) * 2 if square else (height, width)
  top, left = (height - side_y) // 2, (width - side_x) // 2
  x0, x1 = left + int(0.15 * side_x), left + int(0.45 * side_x)
  y0, y1 = top + int(0.55 * side_y), top + int(0.9 * side_y)
  image = np.zeros((height, width, 3), np.uint8)
  image[y0:y1, x0:x1] = 255
  return image, np.array([x0 / width, y0 / height, x1 / width, y1 / height])


@pytest.mark.parametrize('preprocessing', [OPENAI_CLIP_PREPROCESSING, SIGLIP_PREPROCESSING], ids=['crop', 'squash'])
@pytest.mark.parametrize('height, width', [(60, 100), (96, 40), (37, 91), (50, 50)])
def test_a_box_lands_on_its_pixels_in_the_decoder_image(height, width, preprocessing):
  # Issue 61 item 10: the decoder's aref target is the box of the white rectangle in the image the decoder reads
  # (SigLIP 2's views: the shorter side resized, the centre square kept), checked on that image's pixels.
  size, margin = 32, 2  # margin: the box's bins are one pixel wide; bicubic blurs an edge over about a pixel
  image, box = _white_rectangle(height, width, square=preprocessing.resize != 'squash')
  layout = locca_tasks.tokenizer_layout(default_tokenizer(), box_bins=size, length=16)
  views = Siglip2Views(size, 16, num_global=0, num_local=0, decoder_layout=layout, decoder_tasks=('aref',),
                       preprocessing=preprocessing)
  example = {'image': image, 'caption': 'a white rectangle', 'label': -1,
             'regions': Regions(box[None].astype(np.float32), ('white rectangle',))}
  out = views.random_map(example, np.random.default_rng(0))
  targets = out['locca_targets'][0][out['locca_loss_mask'][0] > 0]
  coordinates = [int(t) for t in targets if layout.first_coordinate <= t < layout.first_coordinate + size]
  got = locca_tasks.tokens_to_box(coordinates, layout) * size  # pixels of the decoder image
  bright = out['image'].mean(axis=-1)
  rows, cols = np.mgrid[:size, :size] + 0.5  # pixel centres
  inner = (cols > got[0] + margin) & (cols < got[2] - margin) & (rows > got[1] + margin) & (rows < got[3] - margin)
  outer = (cols < got[0] - margin) | (cols > got[2] + margin) | (rows < got[1] - margin) | (rows > got[3] + margin)
  assert inner.sum() >= 9 and outer.sum() >= 9
  assert bright[inner].min() > 200, 'the box misses the rectangle'
  assert bright[outer].max() < 55, 'the rectangle spills out of the box'


@pytest.mark.parametrize('preprocessing', [OPENAI_CLIP_PREPROCESSING, TORCHVISION_CLIP_PREPROCESSING,
                                           SIGLIP_PREPROCESSING], ids=['floor', 'round', 'squash'])
def test_view_window_is_what_resize_image_keeps(preprocessing):
  # Naive reference: an image whose pixels hold their own column index (a linear ramp, which bicubic resampling
  # keeps away from the borders), so each output pixel says which column of the original it shows; the window's
  # left edge and width in original pixels predict it (output pixel centres at (j + 0.5) / size of the window).
  size = 32
  for height, width in ((60, 100), (100, 60), (37, 91), (64, 64)):
    for axis, length in ((1, width), (0, height)):
      ramp = np.arange(length, dtype=np.float64)
      image = np.broadcast_to(ramp[None, :, None] if axis == 1 else ramp[:, None, None], (height, width, 3))
      shown = preprocessing.resize_image(image.astype(np.uint8), size).mean(axis=(0, 2) if axis == 1 else (1, 2))
      window = locca_tasks.view_window(height, width, size, preprocessing)
      low, high = (window[0], window[2]) if axis == 1 else (window[1], window[3])
      want = (low + (np.arange(size) + 0.5) / size * (high - low)) * length - 0.5
      interior = slice(3, size - 3)  # the kernel is cut at the image's borders
      np.testing.assert_allclose(shown[interior], want[interior], atol=0.75)


def test_regions_mostly_cut_off_by_the_centre_crop_are_dropped():
  regions = Regions(np.array([[0.0, 0.1, 0.1, 0.5],    # in the left margin a 100x50 image's centre crop cuts off
                              [0.2, 0.2, 0.3, 0.8],    # half in the margin (x 0.25 is the crop's left edge)
                              [0.4, 0.4, 0.6, 0.6]],   # in the middle
                             np.float32), ('left', 'edge', 'middle'))
  view = locca_tasks.regions_in_view(regions, 50, 100, 32)
  assert view.texts == ('edge', 'middle')
  np.testing.assert_allclose(view.boxes, [[0.0, 0.2, 0.1, 0.8], [0.3, 0.4, 0.7, 0.6]], atol=1e-6)
  assert locca_tasks.regions_in_view(regions, 64, 64, 32) is regions  # a square image: as it was
  assert locca_tasks.regions_in_view(None, 50, 100, 32) is None


@pytest.mark.parametrize('key, value', [('crop_scale', (0.5, 1.0)), ('augment', 'randaugment')])
def test_image_settings_that_move_pixels_are_refused_with_location_tasks(key, value):
  data = ml_collections.ConfigDict({'crop_scale': (), 'augment': 'none'})
  locca_tasks.check_box_geometry(('cap', 'aref'), data)
  data[key] = value
  with pytest.raises(ConfigError, match=rf"config.data.{key}=.*location tasks \['aref'\]"):
    locca_tasks.check_box_geometry(('cap', 'aref'), data)
  locca_tasks.check_box_geometry(('cap',), data)  # captioning reads no box
