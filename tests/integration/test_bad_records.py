"""Bad records never stop training (docs/reliability.md, guarantee 8): every odd image mode decodes to the right RGB,
broken records are replaced by good ones from the same source with the batch shape unchanged, skips are counted per
reason and named on stdout (shard, key, reason, running count; a few per shard, then summaries), and a shard of mostly
bad records stops the run with its name in the message."""
import io
import os

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from PIL import Image

from support import write_webdataset
from vlp_jax.errors import EXIT_DATA, DataError
from vlp_jax.objectives import views
from vlp_jax.data.loading import mixing, pipeline, record_stats
from vlp_jax.data.sources import synthetic_shapes as synthetic, webdataset_tars as webdataset
from vlp_jax.data.storage import records
from vlp_jax.data.loading.record_stats import NAMED_PER_SHARD, RecordStats
from vlp_jax.training.checkpoint import Checkpointer
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
  buffer = io.BytesIO()
  image.save(buffer, format=fmt, **options)
  return buffer.getvalue()


def test_every_image_mode_decodes_to_the_right_rgb():
  grey = np.array([[0, 128], [200, 255]], np.uint8)
  np.testing.assert_array_equal(records.decode_image(_encode(Image.fromarray(grey), 'PNG')),
                                np.repeat(grey[..., None], 3, axis=-1))
  # 16-bit: scaled to 8 bits (65535 -> 255, 32896 -> 128), not clipped to 255
  deep = np.array([[0, 32896], [65535, 257]], np.uint16)
  np.testing.assert_array_equal(records.decode_image(_encode(Image.fromarray(deep), 'PNG'))[..., 0],
                                [[0, 128], [255, 1]])
  # transparency on white: a transparent red pixel is white, an opaque one red, half-transparent in between
  rgba = np.array([[[255, 0, 0, 0], [255, 0, 0, 255], [255, 0, 0, 128]]], np.uint8)
  np.testing.assert_allclose(records.decode_image(_encode(Image.fromarray(rgba), 'PNG')).astype(int),
                             [[[255, 255, 255], [255, 0, 0], [255, 127, 127]]], atol=1)
  # palette with a transparent index
  palette = Image.fromarray(np.array([[0, 1]], np.uint8), mode='P')
  palette.putpalette([0, 0, 255, 0, 255, 0] + [0] * 762)
  np.testing.assert_array_equal(records.decode_image(_encode(palette, 'PNG', transparency=0)),
                                [[[255, 255, 255], [0, 255, 0]]])
  # CMYK JPEG: pure cyan is (0, 255, 255) within JPEG's error
  cmyk = Image.new('CMYK', (8, 8), (255, 0, 0, 0))
  np.testing.assert_allclose(records.decode_image(_encode(cmyk, 'JPEG', quality=100)).mean(axis=(0, 1)),
                             [0, 255, 255], atol=3)


@pytest.mark.parametrize('data, reason', [
    (b'', 'empty_image'),
    (b'not an image at all', 'corrupt_image'),
    ('truncated', 'corrupt_image'),
    ('huge', 'too_large'),
])
def test_broken_images_raise_with_their_reason(data, reason):
  image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8))
  if data == 'truncated':
    data = _encode(image, 'JPEG')[:300]
  max_pixels = records.DEFAULT_MAX_PIXELS
  if data == 'huge':
    data, max_pixels = _encode(image, 'PNG'), 64 * 64 - 1
  with pytest.raises(records.BadRecordError) as error:
    records.decode_image(data, max_pixels=max_pixels)
  assert error.value.reason == reason


def test_captions_that_are_not_utf8_lose_a_character_not_the_record():
  example = synthetic.make_example(0, 'train', 'studio', 0, 16)
  packed = records.serialize({**example, 'caption': 'a red circle'}).replace(b'a red circle', b'a r\xffd circle')
  assert records.deserialize(packed)['caption'] == 'a r\ufffdd circle'
  raw = records.serialize({**example, 'caption': b'caf\xe9 bytes'})
  assert records.deserialize(raw)['caption'] == 'caf\ufffd bytes'
  with pytest.raises(records.BadRecordError) as error:
    records.deserialize(b'\x93garbage')
  assert error.value.reason == 'not_a_record'


def _bad_record(kind: str, example: dict) -> bytes:
  if kind == 'garbage':
    return b'\x00\x01 definitely not msgpack'
  if kind == 'empty_caption':
    return records.serialize({**example, 'caption': '  '})
  if kind == 'truncated':
    return records.serialize({**example, 'image': example['image'][:len(example['image']) // 2]})
  return records.serialize({**example, 'image': b''})


BAD_KINDS = {'garbage': 'not_a_record', 'empty_caption': 'empty_caption', 'truncated': 'corrupt_image',
             'empty': 'empty_image'}


def _write_shards(directory, bad_every: dict[str, int], per_shard=24):
  """One shard per source; in source s, every bad_every[s]-th record is broken (cycling over BAD_KINDS). Returns
  (paths, {source: indices of its good records}, {reason: count})."""
  os.makedirs(directory, exist_ok=True)
  paths, good, bad = [], {}, {}
  kinds = list(BAD_KINDS)
  for source, every in bad_every.items():
    path = os.path.join(directory, f'{source}.array_record')
    writer = ArrayRecordWriter(path, 'group_size:1')
    good[source] = set()
    for i in range(per_shard):
      example = synthetic.make_example(0, 'train', source, i, 16)
      if every and i % every == every - 1:
        kind = kinds[(i // every) % len(kinds)]
        writer.write(_bad_record(kind, example))
        bad[BAD_KINDS[kind]] = bad.get(BAD_KINDS[kind], 0) + 1
      else:
        writer.write(records.serialize(example))
        good[source].add(i)
    writer.close()
    paths.append(path)
  return paths, good, bad


class KeyViews(views.ClipViews):
  """CLIP's views plus the example key's index, to see which records made it into a batch."""

  def random_map(self, example, rng):
    out = super().random_map(example, rng)
    out['source_index'] = np.int32(synthetic.SOURCES.index(example['source']))
    out['index'] = np.int32(example['key'].split('/')[-1])
    return out


@pytest.mark.parametrize('mode', ['mixed', 'single_source'])
def test_bad_records_are_replaced_from_their_own_source_counted_and_named(tmp_path, capsys, mode):
  paths, good, bad = _write_shards(str(tmp_path), {'studio': 3, 'web': 4})
  sources = mixing.shard_sources(paths)
  iterator = pipeline.train_iterator(paths, KeyViews(image_size=16, context_length=16),
                                     pipeline.PipelineSettings(seed=1, global_batch_size=8, process_index=0,
                                     process_count=1, mixing=mode), sources=sources)
  stats = RecordStats(paths, mixing.source_names(sources), max_bad_fraction=1.0)
  for _ in range(6):  # one epoch of 48 records
    batch, status = pipeline.pop_status(next(iterator))
    assert batch['image'].shape == (8, 16, 16, 3) and batch['text'].shape == (8, 16)
    for s, i in zip(batch['source_index'], batch['index']):  # every row is a good record ...
      assert i in good[synthetic.SOURCES[s]]
    if mode == 'single_source':  # ... from the batch's one source
      assert len(set(batch['source_index'].tolist())) == 1
    stats.update(status)
  metrics = stats.metrics()
  if mode == 'mixed':  # one pass over the shuffled records: every bad record met exactly once
    assert {r: metrics[f'train/data/skipped/{r}'] for r in records.SKIP_REASONS if
            metrics[f'train/data/skipped/{r}']} == bad
    assert metrics['train/data/examples/studio'] + metrics['train/data/examples/web'] == 48
  assert metrics['train/data/skipped_fraction'] > 0
  # Each bad record met is named on stdout as it is met: its shard, its key where the record could be read, its
  # reason and the running count, up to NAMED_PER_SHARD per shard.
  named = [line for line in capsys.readouterr().out.splitlines() if line.startswith('bad record ')]
  for path, source in zip(paths, ('studio', 'web')):
    lines = [line for line in named if f' in {path}' in line]
    assert 0 < len(lines) <= NAMED_PER_SHARD
    if mode == 'mixed':
      assert len(lines) == NAMED_PER_SHARD  # 8 and 6 bad records: more than are named
    for line in lines:
      reason = line.split(': ')[1].split(' in ')[0]
      assert reason in BAD_KINDS.values()
      assert (f'(key {source}/train/' in line) == (reason != 'not_a_record')  # garbage bytes have no readable key
  counts = [int(line.split(':')[0].split()[-1]) for line in named]
  assert counts == sorted(counts) and len(set(counts)) == len(counts)


def test_bad_records_are_named_a_few_per_shard_then_summarised(capsys, monkeypatch):
  monkeypatch.setattr(record_stats, 'MAX_NAMED', 4)  # named lines per run, whatever the shard
  stats = RecordStats(['/d/a.tar', '/d/b.tar'], ('web',), max_bad_fraction=1.0)
  corrupt, missing = (1 + records.SKIP_REASONS.index(r) for r in ('corrupt_image', 'missing_caption'))
  # shard a: 120 corrupt images and a good record; then shard b: 2 samples without caption
  errors = np.array([corrupt] * 60 + [0] + [corrupt] * 60 + [missing] * 2, np.int32)
  keys = [f'a{i}' for i in range(121)] + ['b0', 'b1']
  stats.update({'record_error': errors, 'record_shard': np.array([0] * 121 + [1] * 2, np.int32),
                'record_source': np.zeros(123, np.int32), 'record_key': np.array(keys),
                'record_detail': np.array(['' if e == 0 else 'OSError: truncated' for e in errors])})
  out = capsys.readouterr().out.splitlines()
  named = [line for line in out if line.startswith('bad record ')]
  assert [line.split('(key ')[1].split(')')[0] for line in named] == ['a0', 'a1', 'a2', 'b0']  # b1: over MAX_NAMED
  assert named[0].startswith('bad record 1: corrupt_image in /d/a.tar (key a0): OSError: truncated')
  assert named[3].startswith('bad record 121: missing_caption in /d/b.tar (key b0)')  # the good record not counted
  summaries = [line for line in out if line.startswith('bad records: ') and ' so far in ' in line]
  assert [line.split(' so far')[0] for line in summaries] == ['bad records: 10', 'bad records: 100']
  assert '/d/a.tar (corrupt_image 100); 100 in all' in summaries[1]
  assert len(out) == len(named) + len(summaries) + 1  # and one note that later records go unnamed
  assert stats.metrics()['train/data/skipped/corrupt_image'] == 120


def test_webdataset_bad_samples_are_named_with_their_shard_and_key(tmp_path, capsys):
  paths = write_webdataset(str(tmp_path), {'web': 2}, samples_per_shard=6)['web']  # shard 0: three bad samples
  iterator = pipeline.train_iterator(paths, views.ClipViews(image_size=16, context_length=16),
                                     pipeline.PipelineSettings(seed=0, global_batch_size=4, process_index=0,
                                     process_count=1), sources=['web', 'web'], shard_records=webdataset.TarShardRecords)
  stats = RecordStats(paths, ('web',), max_bad_fraction=1.0)
  for _ in range(3):  # one epoch of 12 samples
    stats.update(pipeline.pop_status(next(iterator))[1])
  named = [line for line in capsys.readouterr().out.splitlines() if line.startswith('bad record ')]
  assert sorted(line.split(': ', 1)[1].split(';')[0] for line in named) == sorted([
      f'missing_image in {paths[0]} (key web000001): the sample has no jpg/png/jpeg/webp member',
      f'missing_caption in {paths[0]} (key web000002): the sample has no txt member',
      f'corrupt_image in {paths[0]} (key web000003): UnidentifiedImageError: cannot identify image file'])


def test_a_shard_of_mostly_bad_records_stops_with_its_name():
  paths = ['/data/good.array_record', '/data/bad.array_record']
  stats = RecordStats(paths, ('cc3m',), max_bad_fraction=0.25)
  n = 100  # half bad against a limit of a quarter: beyond chance after a few dozen reads (data/loading/record_stats.py)
  errors = np.array([0] * n + [2] * (n // 2) + [0] * (n // 2), np.int32)  # bad: half corrupt_image
  stats.update({'record_error': errors, 'record_shard': np.array([0] * n + [1] * n, np.int32),
                'record_source': np.zeros(2 * n, np.int32)})
  with pytest.raises(DataError, match=r'/data/bad.array_record: 50 of 100 records bad \(empty_image 50\)'):
    stats.metrics()
  lenient = RecordStats(paths, ('cc3m',), max_bad_fraction=0.5)
  lenient.update({'record_error': errors, 'record_shard': np.array([0] * n + [1] * n, np.int32),
                  'record_source': np.zeros(2 * n, np.int32)})
  assert lenient.metrics()['train/data/skipped/empty_image'] == n // 2


@pytest.mark.slow
def test_training_counts_skips_and_stops_on_a_broken_shard(micro, tmp_path):
  _write_shards(str(tmp_path / 'data'), {'studio': 6, 'web': 0, 'sketch': 2}, per_shard=32)
  micro.data.name, micro.data.path = 'array_record', str(tmp_path / 'data')
  micro.eval.every_steps = 100
  micro.total_steps, micro.log_every_steps = 6, 2
  micro.data.max_bad_fraction = 0.2  # half the sketch shard is broken
  # a few dozen of its records are read: at this tolerance of false stops, enough to show it
  # (data/loading/record_stats.py)
  micro.data.bad_data_alpha = 0.5
  with pytest.raises(DataError, match='sketch.array_record: '):
    train_and_evaluate(micro, str(tmp_path / 'run'))
  # Found at the log of step 4 (by step 2 too few of the sketch shard's records had been read to show it); the
  # state of that step is kept.
  assert Checkpointer(str(tmp_path / 'run')).latest_complete_step() == 4
  assert EXIT_DATA == 4
  # Until then, training went on, with the skips and the source mix in the metrics.
  logged = [m for m in read_metrics(str(tmp_path / 'run')) if 'train/data/skipped_fraction' in m]
  assert [m['step'] for m in logged] == [2]
  assert 0 < logged[0]['train/data/skipped_fraction'] < 0.5
  assert sum(logged[0]['train/data/examples/' + s] for s in ('studio', 'web', 'sketch')) == 2 * micro.batch_size
  # where the host's time went between logs: waiting for data, or for the devices (perf/, issue 9)
  assert 0 <= logged[0]['perf/data_wait_fraction'] < 1 and 0 <= logged[0]['perf/device_wait_fraction'] < 1
  assert logged[0]['perf/step_seconds'] > 0
