"""The converter library (vlp_jax/data/ingest/): the input-format table and its interface (a new format is one
class), the readers of the built-in formats, and the options that go into the manifest. The converter end to end is
tests/integration/test_convert_command.py."""
import io
import json
import os
import tarfile

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader
from PIL import Image

from vlp_jax.config import base_config
from vlp_jax.data.storage import records
from vlp_jax.data.ingest import converter as convert, folder, input_format as base, manifest, table, webdataset


def _png(seed: int) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(np.random.default_rng(seed).integers(0, 256, (8, 8, 3), np.uint8)).save(buffer, format='PNG')
  return buffer.getvalue()


def _serial_reading(totals: list[int] | None = None) -> base.Reading:
  """A Reading without worker processes: map runs each task here, in order."""
  return base.Reading(map=lambda function, tasks: ((task, function(task)) for task in tasks),
                      estimate_total=(totals if totals is not None else []).append)


def _options(layout: base.InputFormat, input_path: str, **overrides) -> base.Options:
  arguments = dict(image_column=None, caption_column=None, image_keys=webdataset.DEFAULT_IMAGE_KEYS,
                   caption_key=webdataset.DEFAULT_CAPTION_KEY, jsonl=None, long_captions=None, source=None,
                   max_side=0, max_pixels=records.DEFAULT_MAX_PIXELS, prefix='train', examples_per_shard=10)
  return convert.resolve_options(layout, input_path, **{**arguments, **overrides})


def test_the_built_in_formats_are_listed_in_order_and_an_unknown_one_names_them():
  assert list(base.INPUT_FORMATS)[:4] == ['tsv', 'csv', 'webdataset', 'folder']
  assert isinstance(convert.input_format('csv'), table.CsvFormat)
  with pytest.raises(base.ConvertError, match="--format 'parquet' is not known; valid formats: tsv, csv, webdataset, "
                                              'folder'):
    convert.input_format('parquet')


class LinesFormat(base.InputFormat):
  """A format a user might add: .txt files whose lines are `image file|caption`."""
  name, suffix = 'lines', '.txt'

  def entries(self, files, options, reading):
    for path in files:
      with open(path, encoding='utf-8') as f:
        for line in f:
          image, caption = line.rstrip('\n').split('|')
          yield base.Entry(key=image, image=os.path.join(os.path.dirname(path), image), caption=caption)


def test_a_new_format_is_one_registered_class(tmp_path, monkeypatch):
  monkeypatch.setitem(base.INPUT_FORMATS, 'lines', LinesFormat)
  (tmp_path / 'in').mkdir()
  (tmp_path / 'in' / 'a.png').write_bytes(_png(1))
  (tmp_path / 'in' / 'pairs.txt').write_text('a.png|a red square\nmissing.png|gone\n')
  summary = convert.convert('lines', str(tmp_path / 'in'), str(tmp_path / 'out'), num_workers=1, progress=False)
  assert summary == {'written': 1, 'skipped': {'missing_file': 1}, 'shards': 1}
  reader = ArrayRecordReader(str(tmp_path / 'out' / 'train-00000-of-00001.array_record'))
  (example,) = [records.deserialize(r) for r in reader.read_all()]
  reader.close()
  assert (example['key'], example['caption'], example['source']) == ('a.png', 'a red square', 'in')
  assert example['image'] == _png(1)
  with open(tmp_path / 'out' / manifest.MANIFEST, encoding='utf-8') as f:
    assert json.load(f)['fingerprint']['options']['format'] == 'lines'


def test_options_take_the_formats_defaults_and_keep_the_manifest_keys(tmp_path):
  (tmp_path / 'pairs.tsv').write_text('filepath\tcaption\n')
  tsv = _options(table.TsvFormat(), str(tmp_path / 'pairs.tsv'), image_keys='.JPG; png;')
  assert (tsv.format, tsv.image_column, tsv.jsonl, tsv.source) == ('tsv', 'filepath', None, 'pairs')
  assert tsv.image_keys == ('jpg', 'png')
  pets = _options(folder.FolderFormat(), str(tmp_path / 'pets'))
  assert (pets.image_column, pets.jsonl) == ('file_name', str(tmp_path / 'pets' / 'metadata.jsonl'))
  # Earlier manifests hold these keys: renaming one makes every earlier conversion look different.
  assert list(manifest.fingerprint_of([], tsv)['options']) == [
      'format', 'image_column', 'caption_column', 'image_keys', 'caption_key', 'jsonl', 'source', 'max_side',
      'max_pixels', 'prefix', 'examples_per_shard', 'long_captions']
  with pytest.raises(base.ConvertError, match='--image_keys is empty'):
    _options(webdataset.WebdatasetFormat(), str(tmp_path), image_keys=' ; ')


def test_image_keys_are_separated_by_commas_as_the_config_key_is(tmp_path):
  layout = webdataset.WebdatasetFormat()
  config_keys = base_config().data.webdataset.image_keys
  assert webdataset.DEFAULT_IMAGE_KEYS == config_keys
  assert _options(layout, str(tmp_path), image_keys=config_keys).image_keys == ('jpg', 'png', 'jpeg', 'webp')
  # ';' (the earlier separator) still works, with the same options and so the same manifest
  assert _options(layout, str(tmp_path), image_keys='webp;png') == _options(layout, str(tmp_path),
                                                                            image_keys='webp, png')


def test_table_rows_become_entries(tmp_path):
  path = tmp_path / 'data.tsv'
  path.write_bytes(b'filepath\tcaption\nimgs/a.jpg\t a fox \n\n\tno image\nb\xff.jpg\tbad bytes\n')
  layout = table.TsvFormat()
  options = _options(layout, str(path))
  assert layout.count_rows([str(path)], options) == 4  # lines less the header: a blank line counts too
  entries = list(layout.entries([str(path)], options, _serial_reading()))
  assert [e.key for e in entries] == ['imgs/a.jpg', '', 'b\\udcff.jpg']  # an undecodable byte, escaped
  assert entries[0].image == str(tmp_path / 'imgs' / 'a.jpg') and entries[0].caption == 'a fox'
  assert entries[1].skip == 'missing_image_key' and entries[1].image is None
  with pytest.raises(base.ConvertError, match="no column 'label'"):
    list(layout.entries([str(path)], _options(layout, str(path), caption_column='label'), _serial_reading()))


def test_folder_metadata_lines_become_entries(tmp_path):
  (tmp_path / 'metadata.jsonl').write_text('\n'.join([
      json.dumps({'file_name': 'a.png', 'caption': 'cat'}), '[1, 2]', json.dumps({'caption': 'x'}),
      json.dumps({'file_name': 'b.png', 'caption': 7}), json.dumps({'file_name': 'c.png', 'caption': {}})]) + '\n')
  layout = folder.FolderFormat()
  options = _options(layout, str(tmp_path))
  files = layout.input_files(str(tmp_path))
  assert files == [str(tmp_path)] and layout.index_files(files, options) == [options.jsonl]
  entries = list(layout.entries(files, options, _serial_reading()))
  assert [(e.caption, e.skip) for e in entries] == [('cat', None), ('', 'invalid_json'), ('x', 'missing_image_key'),
                                                     ('7', None), ('', 'caption_not_text')]
  with pytest.raises(base.ConvertError, match='does not exist: --format=folder reads'):
    layout.check_inputs(files, _options(layout, str(tmp_path), jsonl=str(tmp_path / 'other.jsonl')))


def _tar(path, members) -> str:
  with tarfile.open(path, 'w') as tar:
    for name, data in members:
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return str(path)


def test_webdataset_tars_become_entries_and_a_broken_tar_is_counted(tmp_path):
  whole = _tar(tmp_path / '0.tar', [('k0.png', _png(0)), ('k0.txt', b'zero'), ('k1.txt', b'no image')])
  broken = _tar(tmp_path / '1.tar', [('k2.png', _png(2)), ('k2.txt', b'two'), ('k3.png', _png(3) * 40)])
  with open(broken, 'rb') as f:
    data = f.read()
  with open(broken, 'wb') as f:
    f.write(data[:data.index(b'k3.png') + 512 + 1000])  # inside the last member, after its 512-byte header
  layout = webdataset.WebdatasetFormat()
  files = layout.input_files(str(tmp_path))
  assert files == [whole, broken] and layout.count_rows(files, None) is None
  totals = []
  reading = _serial_reading(totals)
  entries = list(layout.entries(files, _options(layout, str(tmp_path)), reading))
  assert [(e.key, e.skip) for e in entries] == [('k0', None), ('k1', 'missing_image_key'), ('k2', None),
                                                ('k3', 'corrupt_tar')]
  assert totals == [4, 4]  # from the tars listed so far
