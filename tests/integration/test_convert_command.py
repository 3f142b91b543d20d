"""The data converter (vlp_jax.convert: cli/convert_command.py over data/ingest/): every input format, skipped records,
colour modes, resizing, long captions, determinism across workers, idempotency, and its errors."""
import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import zlib

import numpy as np
import pytest
from absl import flags
from array_record.python.array_record_module import ArrayRecordReader
from PIL import Image

from support import ROOT
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.text.text_crops import split_sentences
from vlp_jax.cli import common
from vlp_jax.cli import convert_command
from vlp_jax.data.ingest import converter as convert
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

REPO = ROOT
PNG_MAGIC, JPEG_MAGIC = b'\x89PNG', b'\xff\xd8'


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
  buffer = io.BytesIO()
  image.save(buffer, format=fmt, **options)
  return buffer.getvalue()


def _noise(height: int, width: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)


def _jpeg(height=16, width=16, seed=0) -> bytes:
  return _encode(Image.fromarray(_noise(height, width, seed)), 'JPEG', quality=90)


def _png(height=16, width=16, seed=0) -> bytes:
  return _encode(Image.fromarray(_noise(height, width, seed)), 'PNG')


def _png_rgb48(values: np.ndarray) -> bytes:
  """[H, W, 3] uint16 -> a 16-bit-per-channel RGB PNG (PIL cannot write one)."""
  def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body))
  height, width = values.shape[:2]
  rows = b''.join(b'\x00' + row.astype('>u2').tobytes() for row in values)
  return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 16, 2, 0, 0, 0))
          + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))


def _write(path, data: bytes) -> str:
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data)
  return str(path)


def _write_table(path, rows, header=('filepath', 'caption'), delimiter=b'\t') -> str:
  """Rows of str or raw bytes cells -> a TSV/CSV file (bytes, so that a test can put non-UTF-8 bytes in a cell)."""
  lines = [delimiter.join(c if isinstance(c, bytes) else c.encode() for c in row) for row in [header, *rows]]
  return _write(path, b'\n'.join(lines) + b'\n')


def _shards(output) -> list[str]:
  return sorted(f for f in os.listdir(output) if f.endswith('.array_record'))


def _read(output) -> list[dict]:
  examples = []
  for name in _shards(output):
    reader = ArrayRecordReader(os.path.join(output, name))
    examples += [records.deserialize(r) for r in reader.read_all()]
    reader.close()
  return examples


def _files(output) -> dict[str, tuple[bytes, int]]:
  """Every file in `output` -> (its bytes, its mtime)."""
  return {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in sorted(output.iterdir())}


def _run(fmt, input_path, output, **options):
  return convert.convert(fmt, str(input_path), str(output), num_workers=options.pop('num_workers', 1),
                         progress=False, **options)


def test_tsv_keeps_plain_images_and_writes_the_schema(tmp_path):
  images = {'imgs/a.jpg': _jpeg(seed=1), 'imgs/b.png': _png(seed=2),
            'imgs/grey.jpg': _encode(Image.fromarray(_noise(16, 16, 3)[..., 0]), 'JPEG')}
  for name, data in images.items():
    _write(tmp_path / 'data' / name, data)
  absolute = _write(tmp_path / 'elsewhere' / 'c.png', _png(seed=4))
  rows = [('imgs/a.jpg', 'a red fox'), ('imgs/b.png', '  a blue car  '), ('imgs/grey.jpg', 'grey noise'),
          (absolute, 'absolute path')]
  tsv = _write_table(tmp_path / 'data' / 'pairs.tsv', rows)
  output = tmp_path / 'out'
  summary = _run('tsv', tsv, output, examples_per_shard=3)
  assert summary == {'written': 4, 'skipped': {}, 'shards': 2}
  assert _shards(output) == ['train-00000-of-00002.array_record', 'train-00001-of-00002.array_record']
  examples = _read(output)
  assert [e['key'] for e in examples] == ['imgs/a.jpg', 'imgs/b.png', 'imgs/grey.jpg', absolute]
  assert [e['caption'] for e in examples] == ['a red fox', 'a blue car', 'grey noise', 'absolute path']
  assert {e['source'] for e in examples} == {'pairs'} and {e['label'] for e in examples} == {-1}
  assert {e['long_caption'] for e in examples} == {''}
  for example, name in zip(examples[:3], images):
    assert example['image'] == images[name]  # plain JPEG / PNG: the original bytes
  assert records.decode_image(examples[2]['image']).shape == (16, 16, 3)


def test_csv_with_named_columns_and_quoted_captions(tmp_path):
  _write(tmp_path / 'x.png', _png(seed=5))
  csv_path = _write_table(tmp_path / 'meta.csv', [('x.png', b'"a dog, sitting ""politely"""')],
                          header=('path', 'text'), delimiter=b',')
  summary = _run('csv', csv_path, tmp_path / 'out', image_column='path', caption_column='text', source='pets')
  assert summary['written'] == 1
  (example,) = _read(tmp_path / 'out')
  assert example['caption'] == 'a dog, sitting "politely"' and example['source'] == 'pets'


def test_bad_records_are_skipped_and_counted(tmp_path):
  folder = tmp_path / 'data'
  for i in range(3):
    _write(folder / f'good{i}.jpg', _jpeg(seed=10 + i))
  full = _jpeg(seed=20)
  _write(folder / 'truncated.jpg', full[:len(full) // 2])
  _write(folder / 'corrupt.jpg', b'this is not an image at all')
  _write(folder / 'empty.jpg', b'')
  _write(folder / 'huge.png', _png(40, 40))  # 1600 pixels > --max_pixels
  rows = [('good0.jpg', 'fine'), ('truncated.jpg', 'cut short'), ('corrupt.jpg', 'junk'), ('empty.jpg', 'nothing'),
          ('nowhere.jpg', 'missing'), ('good1.jpg', '   '), ('good1.jpg', b'caf\xe9 latin-1'), ('huge.png', 'big'),
          ('', 'no image'), ('good2.jpg', 'still fine after the bad rows')]
  tsv = _write_table(folder / 'mixed.tsv', rows)
  summary = _run('tsv', tsv, tmp_path / 'out', max_pixels=1000)
  assert summary == {'written': 2, 'shards': 1, 'skipped': {
      'caption_not_utf8': 1, 'corrupt_image': 2, 'empty_caption': 1, 'empty_image': 1, 'missing_file': 1,
      'missing_image_key': 1, 'too_large': 1}}
  assert [e['key'] for e in _read(tmp_path / 'out')] == ['good0.jpg', 'good2.jpg']
  assert set(summary['skipped']) <= set(convert.INPUT_SKIP_REASONS)


def _tar(path, members: list[tuple[str, bytes]]) -> str:
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  with tarfile.open(path, 'w') as tar:
    for name, data in members:
      info = tarfile.TarInfo(name)
      info.size, info.mtime = len(data), 0
      tar.addfile(info, io.BytesIO(data))
  return str(path)


def test_webdataset_samples_and_bad_samples(tmp_path):
  webp = _encode(Image.fromarray(_noise(16, 16, 7)), 'WEBP', quality=80)
  _tar(tmp_path / 'wds' / '00000.tar', [
      ('000000000.jpg', _jpeg(seed=1)), ('000000000.txt', b'first\n'), ('000000000.json', b'{"url": "x"}'),
      ('000000001.png', _png(seed=2)), ('000000001.jpg', _jpeg(seed=3)), ('000000001.txt', b'jpg wins over png'),
      ('000000002.txt', b'no image'), ('000000003.jpg', _jpeg(seed=4)),
      ('000000004.webp', webp), ('000000004.txt', b'\xff\xfe bad bytes')])
  _tar(tmp_path / 'wds' / '00001.tar', [('000000005.webp', webp), ('000000005.txt', 'caf\u00e9 \u2615'.encode()),
                                        ('000000006.jpg', _jpeg(seed=6)), ('000000006.txt', b' \n')])
  _write(tmp_path / 'wds' / 'notes.md', b'not a tar')
  summary = _run('webdataset', tmp_path / 'wds', tmp_path / 'out')
  assert summary == {'written': 3, 'shards': 1, 'skipped': {
      'caption_not_utf8': 1, 'empty_caption': 1, 'missing_caption_key': 1, 'missing_image_key': 1}}
  examples = _read(tmp_path / 'out')
  assert [e['key'] for e in examples] == ['000000000', '000000001', '000000005']
  assert [e['caption'] for e in examples] == ['first', 'jpg wins over png', 'caf\u00e9 \u2615']
  assert examples[1]['image'] == _jpeg(seed=3) and examples[2]['image'] == webp
  assert {e['source'] for e in examples} == {'wds'}
  assert _run('webdataset', tmp_path / 'wds' / '*.tar', tmp_path / 'globbed') == summary  # a glob of the same tars
  assert _files(tmp_path / 'globbed')['train-00000-of-00001.array_record'][0] == \
      _files(tmp_path / 'out')['train-00000-of-00001.array_record'][0]


@pytest.mark.parametrize('where', ['inside_an_image', 'inside_a_header', 'between_samples'])
def test_webdataset_truncated_tar_counts_one_corrupt_tar_and_progress_agrees(tmp_path, capsys, where):
  members = [(f'{i:09d}.{ext}', _png(seed=i) if ext == 'png' else f'caption {i}'.encode())
             for i in range(5) for ext in ('png', 'txt')]
  path = _tar(tmp_path / 'wds' / 'a.tar', members)
  with open(path, 'rb') as f:
    data = f.read()
  header = data.index(b'000000003.png')  # the tar header of sample 3's image
  cut = {'inside_an_image': data.index(b'IEND', header) - 100, 'inside_a_header': header + 200,
         'between_samples': header}[where]
  _write(path, data[:cut])
  summary = convert.convert('webdataset', path, str(tmp_path / 'out'), num_workers=1)
  assert summary['written'] == 3 and summary['skipped'] == {'corrupt_tar': 1}  # the lost rest, however much it was
  assert [e['key'] for e in _read(tmp_path / 'out')] == ['000000000', '000000001', '000000002']
  err = capsys.readouterr().err
  assert f'{path} is truncated' in err and f'byte {cut}' in err
  # the progress line's final count is the examples the summary accounts for
  counted = int(re.findall(r'convert: (\d+) examples', err)[-1])
  assert counted == summary['written'] + sum(summary['skipped'].values())


def test_help_shows_the_example_commands_as_written_and_the_image_keys_separator():
  # A backslash at a line's end in the docstring had joined two lines of an example into one, with a run of spaces.
  assert [line for line in convert_command.__doc__.splitlines() if re.search(r'\S {3,}\S', line)] == []
  flag_values = flags.FlagValues()
  convert_command.define_flags(flag_values)
  assert 'comma-separated' in flag_values['image_keys'].help and ',' in flag_values['image_keys'].default


def test_folder_modes_become_correct_rgb(tmp_path):
  folder = tmp_path / 'pets'
  grey = np.arange(256, dtype=np.uint8).reshape(16, 16)
  rgba = np.zeros((16, 16, 4), np.uint8)
  rgba[:8] = (255, 0, 0, 255)  # opaque red on top, fully transparent (black) below
  rgba[8:, :8] = (0, 0, 255, 128)  # half-transparent blue
  palette = Image.fromarray(np.tile(np.array([[0, 1]], np.uint8), (16, 8)), 'P')
  palette.putpalette([0, 200, 0, 10, 20, 30])
  deep = np.zeros((16, 16), np.uint16)
  deep[:, :4], deep[:, 4:8], deep[:, 8:12] = 65535, 32896, 257
  deep_rgb = np.zeros((16, 16, 3), np.uint16)
  deep_rgb[..., 0], deep_rgb[..., 2] = 65535, 32896
  cmyk = Image.new('CMYK', (16, 16), (0, 255, 255, 0))  # red
  rotated = np.zeros((10, 20, 3), np.uint8)
  rotated[:, :10] = 255  # left half white; EXIF 6 = turn 90 degrees clockwise to view: white on top
  exif = Image.Exif()
  exif[0x0112] = 6
  images = {
      'grey.png': _encode(Image.fromarray(grey), 'PNG'),
      'rgba.png': _encode(Image.fromarray(rgba), 'PNG'),
      'palette.png': _encode(palette, 'PNG', transparency=1),
      'deep.png': _encode(Image.fromarray(deep), 'PNG'),
      'deep_rgb.png': _png_rgb48(deep_rgb),
      'cmyk.jpg': _encode(cmyk, 'JPEG', quality=95),
      'la.png': _encode(Image.fromarray(np.stack([grey, np.full_like(grey, 0)], -1), 'LA'), 'PNG'),
      'plain.bmp': _encode(Image.fromarray(_noise(16, 16, 9)), 'BMP'),
      'rotated.jpg': _encode(Image.fromarray(rotated), 'JPEG', quality=95, exif=exif),
  }
  for name, data in images.items():
    _write(folder / name, data)
  lines = [json.dumps({'file_name': n, 'caption': f'a {n}'}) for n in images]
  lines += ['{not json', json.dumps({'caption': 'no file'}), json.dumps({'file_name': 'grey.png', 'caption': ['x']}),
            json.dumps({'file_name': 'grey.png'}), json.dumps({'file_name': 'grey.png', 'caption': 1984})]
  _write(folder / 'metadata.jsonl', '\n'.join(lines).encode() + b'\n')
  summary = _run('folder', folder, tmp_path / 'out')
  assert summary == {'written': 10, 'shards': 1, 'skipped': {
      'caption_not_text': 1, 'empty_caption': 1, 'invalid_json': 1, 'missing_image_key': 1}}
  written = _read(tmp_path / 'out')
  assert [e['key'] for e in written] == [*images, 'grey.png']
  assert written[-1]['caption'] == '1984'  # a number is a caption; a list is not
  examples = {e['key']: e for e in written[:-1]}
  decoded = {k: records.decode_image(e['image']) for k, e in examples.items()}
  assert examples['grey.png']['image'] == images['grey.png']  # plain: kept
  np.testing.assert_array_equal(decoded['grey.png'][..., 1], grey)
  np.testing.assert_array_equal(decoded['rgba.png'][0, 0], (255, 0, 0))
  np.testing.assert_array_equal(decoded['rgba.png'][15, 15], (255, 255, 255))  # alpha 0 -> white, not black
  np.testing.assert_allclose(decoded['rgba.png'][15, 0], (127, 127, 255), atol=1)
  np.testing.assert_array_equal(decoded['palette.png'][0, 0], (0, 200, 0))
  np.testing.assert_array_equal(decoded['palette.png'][0, 1], (255, 255, 255))  # the transparent index
  np.testing.assert_array_equal(decoded['deep.png'][0, [0, 4, 8, 12], 0], (255, 128, 1, 0))  # scaled, not clipped
  np.testing.assert_array_equal(decoded['deep_rgb.png'][3, 3], (255, 0, 128))
  np.testing.assert_allclose(decoded['cmyk.jpg'][8, 8], (255, 0, 0), atol=3)
  np.testing.assert_array_equal(decoded['la.png'], 255)  # fully transparent grey on white
  np.testing.assert_array_equal(decoded['plain.bmp'], _noise(16, 16, 9))  # lossless source: PNG, exact
  assert decoded['rotated.jpg'].shape == (20, 10, 3)
  assert decoded['rotated.jpg'][:8].mean() > 240 and decoded['rotated.jpg'][12:].mean() < 15
  for name in ('rgba.png', 'palette.png', 'deep.png', 'deep_rgb.png', 'la.png', 'plain.bmp', 'cmyk.jpg',
               'rotated.jpg'):
    stored = examples[name]['image']
    assert stored != images[name] and stored.startswith(JPEG_MAGIC if name.endswith('.jpg') else PNG_MAGIC), name
    with Image.open(io.BytesIO(stored)) as image:  # re-encoded as plain RGB: any decoder gets it right
      assert image.mode == 'RGB' and not image.info.get('transparency') and not image.getexif(), name


def test_max_side_shrinks_keeping_aspect(tmp_path):
  sizes = {'wide.png': (40, 20), 'tall.jpg': (16, 30), 'small.png': (10, 10)}  # (width, height)
  rows = []
  for name, (width, height) in sizes.items():
    data = _png(height, width) if name.endswith('png') else _jpeg(height, width)
    _write(tmp_path / name, data)
    rows.append((name, name))
  tsv = _write_table(tmp_path / 'sizes.tsv', rows)
  _run('tsv', tsv, tmp_path / 'out', max_side=20)
  examples = {e['key']: e for e in _read(tmp_path / 'out')}
  shapes = {k: records.decode_image(e['image']).shape[:2] for k, e in examples.items()}
  assert shapes == {'wide.png': (10, 20), 'tall.jpg': (20, 11), 'small.png': (10, 10)}
  assert examples['wide.png']['image'].startswith(JPEG_MAGIC)
  assert examples['small.png']['image'] == (tmp_path / 'small.png').read_bytes()  # within the limit: kept


def test_long_captions_match_by_key_then_basename(tmp_path):
  for name in ('a.jpg', 'b.png', 'c.jpg', 'd.jpg'):
    _write(tmp_path / 'imgs' / name, _png(seed=len(name)))
  tsv = _write_table(tmp_path / 'cc.tsv', [(f'imgs/{n}', f'short {n}') for n in ('a.jpg', 'b.png', 'c.jpg', 'd.jpg')])
  long_path = _write(tmp_path / 'long.json', json.dumps(
      {'a.jpg': 'not this: the key comes first', 'imgs/a.jpg': 'Long a.', 'b.png': ['Long b', 'and more!', ' '], 'c': 'Long c.',
       'zzz': 'unused'}).encode())
  summary = _run('tsv', tsv, tmp_path / 'out', long_captions=long_path)
  assert summary['long_captions_matched'] == 3
  long_captions = [e['long_caption'] for e in _read(tmp_path / 'out')]
  assert long_captions == ['Long a.', 'Long b. and more!', 'Long c.', '']
  # each caption of a list is a sentence of COSMOS's text-crop pool, never merged with the next one
  assert split_sentences(long_captions[1]) == ['Long b.', 'and more!']


def _many(tmp_path) -> str:
  rows = []
  for i in range(22):
    name = f'img{i:02d}.' + ('png' if i % 3 else 'jpg')
    _write(tmp_path / 'many' / name, _png(12, 14, i) if i % 3 else _jpeg(14, 12, i))
    rows.append((name if i % 7 else 'gone.jpg', f'caption {i}'))
  return _write_table(tmp_path / 'many' / 'many.tsv', rows)


def test_two_workers_write_the_same_bytes_as_one(tmp_path):
  tsv = _many(tmp_path)
  one = _run('tsv', tsv, tmp_path / 'one', examples_per_shard=5, max_side=10)
  two = _run('tsv', tsv, tmp_path / 'two', examples_per_shard=5, max_side=10, num_workers=2)
  assert one == two == {'written': 18, 'skipped': {'missing_file': 4}, 'shards': 4}
  bytes_one, bytes_two = _files(tmp_path / 'one'), _files(tmp_path / 'two')
  assert list(bytes_one) == list(bytes_two)
  for name in bytes_one:
    assert bytes_one[name][0] == bytes_two[name][0], name


def test_second_run_writes_nothing(tmp_path, capsys):
  tsv = _many(tmp_path)
  first = convert.convert('tsv', tsv, str(tmp_path / 'out'), examples_per_shard=5, num_workers=1)
  before = _files(tmp_path / 'out')
  assert convert.MANIFEST in before and len(_shards(tmp_path / 'out')) == 4
  capsys.readouterr()
  second = convert.convert('tsv', tsv, str(tmp_path / 'out'), examples_per_shard=5, num_workers=1)
  assert second == first
  assert _files(tmp_path / 'out') == before  # same bytes, same mtimes
  assert 'already holds this conversion' in capsys.readouterr().err


def test_a_different_conversion_is_refused_unless_overwrite(tmp_path):
  tsv = _many(tmp_path)
  output = tmp_path / 'out'
  _run('tsv', tsv, output, examples_per_shard=5)
  _write(output / 'notes.txt', b'mine')
  with pytest.raises(convert.ConvertError, match=rf'{output}.*different conversion.*--overwrite'):
    _run('tsv', tsv, output, examples_per_shard=10)
  assert len(_shards(output)) == 4
  summary = _run('tsv', tsv, output, examples_per_shard=10, overwrite=True)
  assert summary['shards'] == 2
  assert sorted(os.listdir(output)) == [convert.MANIFEST, 'notes.txt', 'train-00000-of-00002.array_record',
                                        'train-00001-of-00002.array_record']
  foreign = tmp_path / 'foreign'
  _write(foreign / 'data-00000-of-00001.array_record', b'someone else')
  with pytest.raises(convert.ConvertError, match='ArrayRecord files from elsewhere'):
    _run('tsv', tsv, foreign)


def test_a_crash_leaves_no_shard_under_a_final_name(tmp_path, monkeypatch):
  tsv = _many(tmp_path)
  real, calls = convert.prepare_image, []

  def flaky(*args, **kwargs):
    calls.append(1)
    if len(calls) == 12:
      raise RuntimeError('disk on fire')
    return real(*args, **kwargs)

  monkeypatch.setattr(convert, 'prepare_image', flaky)
  with pytest.raises(RuntimeError, match='disk on fire'):
    _run('tsv', tsv, tmp_path / 'out', examples_per_shard=5)
  assert os.listdir(tmp_path / 'out') == []  # the finished temporary shards are gone too
  monkeypatch.setattr(convert, 'prepare_image', real)
  assert _run('tsv', tsv, tmp_path / 'out', examples_per_shard=5)['written'] == 18  # no --overwrite needed


def test_clear_errors(tmp_path):
  tsv = _write_table(tmp_path / 't.tsv', [('a.jpg', 'x')], header=('path', 'text'))
  with pytest.raises(convert.ConvertError, match='valid formats: tsv, csv, webdataset, folder'):
    _run('parquet', tsv, tmp_path / 'out')
  with pytest.raises(convert.ConvertError, match=r"no columns 'filepath' and 'caption'; its columns are \['path', "):
    _run('tsv', tsv, tmp_path / 'out')
  with pytest.raises(convert.ConvertError, match='does not exist'):
    _run('tsv', tmp_path / 'nope.tsv', tmp_path / 'out')
  with pytest.raises(convert.ConvertError, match='matches no files'):
    _run('webdataset', tmp_path / '*.tar', tmp_path / 'out')
  with pytest.raises(convert.ConvertError, match='not writable'):
    _run('tsv', tsv, tmp_path / 't.tsv' / 'sub', image_column='path', caption_column='text')


@pytest.mark.slow
def test_cli_prints_one_json_line(tmp_path):
  _write(tmp_path / 'a.png', _png())
  tsv = _write_table(tmp_path / 'cli.tsv', [('a.png', 'a caption'), ('b.png', 'missing')])
  command = [sys.executable, '-m', 'vlp_jax.convert', '--format=tsv', f'--input={tsv}',
             f'--output={tmp_path / "out"}', '--num_workers=1']
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.count('\n') == 1
  assert json.loads(result.stdout) == {'written': 1, 'skipped': {'missing_file': 1}, 'shards': 1}


def test_cli_error_is_one_line_without_traceback(tmp_path, capsys):
  """The command's flags parsed by absl (into a FlagValues of their own) and its error mapped as every command's."""
  argv = ['convert', '--format=parquet', f'--input={tmp_path}', f'--output={tmp_path / "out"}']
  flag_values = flags.FlagValues()
  convert_command.define_flags(flag_values)
  with pytest.raises(SystemExit) as exit_info:
    common.exit_on_user_error(convert_command.command, common.parse_flags(argv, flag_values), flag_values)
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --format 'parquet' is not known") and 'Traceback' not in err


@pytest.mark.slow
def test_img2dataset_output_to_training(tmp_path, micro):
  """The README's path: webdataset tars as img2dataset writes them -> convert -> train on the shards."""
  members = []
  for i in range(40):
    example = synthetic.make_example(0, 'train', 'web', i, 16)
    key = f'{i:09d}'
    members += [(f'{key}.jpg', _encode(Image.fromarray(records.decode_image(example['image'])), 'JPEG')),
                (f'{key}.txt', example['caption'].encode()), (f'{key}.json', json.dumps({'key': key}).encode())]
  members.append(('000000040.txt', b'a caption without its image'))
  for shard in range(2):
    _tar(tmp_path / 'wds' / f'{shard:05d}.tar', members[shard * 60:(shard + 1) * 60] + (members[120:] if shard else []))
  summary = _run('webdataset', tmp_path / 'wds', tmp_path / 'shards', source='web_demo', examples_per_shard=16)
  assert summary['written'] == 40 and summary['skipped'] == {'missing_image_key': 1}
  micro.data.name, micro.data.path = 'array_record', str(tmp_path / 'shards')
  micro.total_steps, micro.eval.every_steps = 4, 4
  train_and_evaluate(micro, str(tmp_path / 'run'))
  last = [m for m in read_metrics(str(tmp_path / 'run')) if 'train/data/examples/web_demo' in m][-1]
  assert last['train/data/examples/web_demo'] == 4 * micro.batch_size and last['train/data/skipped_fraction'] == 0
