"""webdataset tar shards read as they are (data/sources/webdataset_tars.py): shard patterns, the member index and its
cache, samples read by offset equal to what was written, bad samples named by reason, unreadable shards left out."""
import concurrent.futures
import os
import pickle

import numpy as np
import pytest

from support import write_webdataset
from vlp_jax.data import formats
from vlp_jax.data.loading import mixing
from vlp_jax.data.sources import webdataset_tars as webdataset
from vlp_jax.data.storage import records
from vlp_jax.data.formats import webdataset as webdataset_format
from vlp_jax.config import base_config
from vlp_jax.errors import ConfigError, DataError, DataNotFoundError


def test_brace_patterns_expand_as_webdataset_does(tmp_path):
  assert webdataset.expand_braces('d/{00008..00011}.tar') == [f'd/{i:05d}.tar' for i in range(8, 12)]
  assert webdataset.expand_braces('{a,b}/{1..2}.tar') == ['a/1.tar', 'a/2.tar', 'b/1.tar', 'b/2.tar']
  assert webdataset.expand_braces('plain.tar') == ['plain.tar']
  assert webdataset.parse_sources('laion=/d/laion/{0..3}.tar, /d/cc12m/{a,b}.tar') == [
      ('laion', '/d/laion/{0..3}.tar'), ('cc12m', '/d/cc12m/{a,b}.tar')]
  shards = write_webdataset(str(tmp_path), {'web': 3}, samples_per_shard=2, broken=False)['web']
  assert webdataset.shard_paths(str(tmp_path / 'web')) == shards  # a folder: its tars
  assert webdataset.shard_paths(str(tmp_path / 'web' / '*.tar')) == shards
  assert webdataset.shard_paths(str(tmp_path / 'web' / '{00001..00002}.tar')) == shards[1:]


def test_unnamed_sources_are_named_after_their_own_folder():
  assert webdataset.parse_sources('/d/cc3m,/d/cc12m/, /d/laion/{0..3}.tar,/d/yfcc/*.tar,/d/coyo/00001.tar') == [
      ('cc3m', '/d/cc3m'), ('cc12m', '/d/cc12m/'), ('laion', '/d/laion/{0..3}.tar'), ('yfcc', '/d/yfcc/*.tar'),
      ('coyo', '/d/coyo/00001.tar')]
  # Two patterns of one folder are one source; so are entries named alike on purpose.
  assert [n for n, _ in webdataset.parse_sources('/d/cc3m/{0..1}.tar,/d/cc3m/{2..3}.tar,x=/a/s,x=/b/s')] == [
      'cc3m', 'cc3m', 'x', 'x']


@pytest.mark.parametrize('path_setting', ['/data/a/shards,/data/b/shards/', '/data/a/shards,shards=/data/b/x'])
def test_two_sources_that_would_share_a_name_are_refused(path_setting):
  # Merged silently, they would feed mixing and the per-source metrics as one source.
  with pytest.raises(ConfigError, match=r"'shards' .*NAME=PATTERN") as error:
    webdataset.parse_sources(path_setting)
  assert '/data/a/shards' in str(error.value)


def test_samples_are_read_back_as_written_and_bad_ones_named(tmp_path):
  shards = write_webdataset(str(tmp_path), {'web': 2, 'studio': 1}, samples_per_shard=6)
  paths = shards['web'] + shards['studio']
  data = webdataset.TarShardRecords(paths, sources={p: p.split(os.sep)[-2] for p in paths},
                                    cache_dir=str(tmp_path / 'cache'))
  assert len(data) == 18
  shard, example = data[0]
  assert shard == 0 and example['key'] == 'web000000' and example['source'] == 'web'
  assert example['caption'] == 'web sample 0 of shard 0' and example['label'] == -1
  np.testing.assert_array_equal(records.decode_image(example['image']).shape, (16, 16, 3))
  assert data[1][1]['bad'] == 'missing_image' and data[2][1]['bad'] == 'missing_caption'
  assert 'bad' not in data[3][1]  # not an image: the pipeline's decoder names it corrupt_image
  assert data[8][0] == 1 and data[8][1]['key'] == 'web010002' and 'bad' not in data[8][1]  # no breakage in shard 1
  assert data[12][0] == 2 and data[12][1]['source'] == 'studio'
  # The JSON member's field as the caption; pickled copies (grain's workers) reopen the files.
  as_json = webdataset.TarShardRecords(paths, fields=webdataset.Fields(caption_key='json:caption'))
  assert pickle.loads(pickle.dumps(as_json))[0][1]['caption'] == 'web sample 0 of shard 0 (json)'


@pytest.mark.parametrize('where', ['inside_a_header', 'between_samples', 'inside_an_image'])
def test_every_truncation_of_a_tar_counts_one_corrupt_tar_and_is_named(tmp_path, capsys, where):
  path = write_webdataset(str(tmp_path), {'web': 1}, samples_per_shard=10, broken=False)['web'][0]
  with open(path, 'rb') as f:
    whole = f.read()
  header = whole.index(b'web000006.png')  # the 512-byte tar header of sample 6's first member
  cut = {'inside_a_header': header + 100, 'between_samples': header, 'inside_an_image': header + 512 + 30}[where]
  cut_path = str(tmp_path / 'cut.tar')
  with open(cut_path, 'wb') as f:
    f.write(whole[:cut])
  for _ in range(2):  # the index built, then read from the cache: the same count and the same warning
    data = webdataset.TarShardRecords([cut_path], cache_dir=str(tmp_path / 'cache'))
    examples = [data[i][1] for i in range(len(data))]
    assert [e['key'] for e in examples if 'bad' not in e] == [f'web00{i:04d}' for i in range(6)]
    assert [e['bad'] for e in examples if 'bad' in e] == ['corrupt_tar']  # the lost rest, whatever it held
    out = capsys.readouterr().out
    assert f'{cut_path} is truncated' in out and f'byte {cut}' in out


def test_the_index_is_cached_and_rebuilt_when_the_shard_changes(tmp_path):
  path = write_webdataset(str(tmp_path), {'web': 1}, samples_per_shard=3, broken=False)['web'][0]
  fields, cache = webdataset.Fields(), str(tmp_path / 'cache')
  rows, keys, _ = webdataset.load_index(path, fields, cache)
  cached = webdataset._cache_file(cache, path, fields)  # pylint: disable=protected-access
  assert os.path.exists(cached)
  np.testing.assert_array_equal(webdataset.load_index(path, fields, cache)[0], rows)
  write_webdataset(str(tmp_path), {'web': 1}, samples_per_shard=5, broken=False)  # rewritten: new size and mtime
  assert len(webdataset.load_index(path, fields, cache)[1]) == 5 != len(keys)


def test_cached_indexes_are_read_one_thread_at_a_time(tmp_path, monkeypatch):
  """numpy parses .npy headers with ast, which CPython 3.11 does not make safe across threads (a training process
  died of "AST constructor recursion depth mismatch"): every cached index read by `index_shards`' threads happens
  under webdataset.CACHED_INDEX_READ."""
  paths = write_webdataset(str(tmp_path), {'web': 6}, samples_per_shard=2, broken=False)['web']
  cache = str(tmp_path / 'cache')
  first = webdataset.index_shards(paths, cache_dir=cache)  # builds and caches every index
  reads, load = [], np.load

  def checked_load(*args, **kwargs):
    reads.append(webdataset.CACHED_INDEX_READ.locked())
    return load(*args, **kwargs)
  monkeypatch.setattr(webdataset.np, 'load', checked_load)
  again = webdataset.index_shards(paths, cache_dir=cache, num_threads=6)
  assert reads == [True] * 6
  for path in paths:
    np.testing.assert_array_equal(again.by_path[path].rows, first.by_path[path].rows)


def test_unreadable_shards_are_left_out_and_named_unless_too_many(tmp_path, capsys):
  good = write_webdataset(str(tmp_path), {'web': 3}, samples_per_shard=2, broken=False)['web']
  gz = tmp_path / 'web' / 'packed.tar'
  gz.write_bytes(b'\x1f\x8b' + b'\0' * 100)  # gzip-compressed: cannot be read by offset
  missing = str(tmp_path / 'web' / 'gone.tar')
  paths = good + [str(gz), missing]
  data = webdataset.TarShardRecords(paths)
  assert len(data) == 6 and [p for p, _ in data.unreadable] == [str(gz), missing]
  out = capsys.readouterr().out
  assert 'packed.tar cannot be read' in out and 'gzip-compressed' in out and 'gone.tar' in out
  webdataset.check_unreadable(paths, data.unreadable, max_bad_fraction=0.5)  # 2 of 5: tolerated
  with pytest.raises(DataError, match='2 of 5 webdataset shards cannot be read'):
    webdataset.check_unreadable(paths, data.unreadable, max_bad_fraction=0.1)


def test_config_paths_and_sources(tmp_path):
  write_webdataset(str(tmp_path), {'web': 2, 'studio': 1}, samples_per_shard=2, broken=False)
  data = base_config().data
  data.name = 'webdataset'
  data.path = f'{tmp_path}/web/{{00000..00001}}.tar,photos={tmp_path}/studio'
  assert [(os.path.basename(p), s) for p, s in webdataset_format.shards(data)] == [
      ('00000.tar', 'web'), ('00001.tar', 'web'), ('00000.tar', 'photos')]
  assert len(formats.train_paths(data)) == 3
  data.path = f'{tmp_path}/nothing/*.tar'
  with pytest.raises(DataNotFoundError, match='matches no tar shard'):
    formats.train_paths(data)
  data.path = ''
  with pytest.raises(DataNotFoundError, match='config.data.path is empty'):
    formats.train_paths(data)


def test_resampled_shards_draw_with_replacement_and_resume_anywhere(tmp_path):
  paths = write_webdataset(str(tmp_path), {'web': 5}, samples_per_shard=3, broken=False)['web']
  data = webdataset.TarShardRecords(paths)
  ranges = data.shard_ranges()
  assert ranges == [(3 * k, 3 * k + 3) for k in range(5)]
  stream = mixing.ResampledShards(data, ranges, seed=7, draws_per_chunk=4)
  chunks = [stream.drawn_shards(c) for c in range(200)]
  # Chunk c holds exactly the records of its drawn shards (a shard drawn twice: its records twice), shuffled.
  position = 0
  for c, drawn in enumerate(chunks[:6]):
    want = sorted(data[i][1]['key'] for s in drawn for i in range(*ranges[s]))
    got = [stream[position + j][1]['key'] for j in range(len(want))]
    assert sorted(got) == want and got != want, c
    position += len(want)
  # With replacement, uniform: repeats within a chunk occur, and every shard is drawn about 1/5 of the time.
  assert any(len(set(d.tolist())) < len(d) for d in chunks)
  counts = np.bincount(np.concatenate(chunks), minlength=5)
  assert counts.min() > 0.15 * counts.sum() and counts.max() < 0.25 * counts.sum()
  # Element i depends on (seed, i) alone: a fresh (or unpickled) stream read from anywhere agrees, as a resumed
  # iterator must.
  fresh = pickle.loads(pickle.dumps(mixing.ResampledShards(data, ranges, seed=7, draws_per_chunk=4)))
  for i in (250, 3, 97):
    assert fresh[i][1]['key'] == stream[i][1]['key']
  assert mixing.ResampledShards(data, ranges, seed=8, draws_per_chunk=4).drawn_shards(0).tolist() != \
      chunks[0].tolist() or mixing.ResampledShards(data, ranges, seed=8, draws_per_chunk=4).drawn_shards(1).tolist() \
      != chunks[1].tolist()


def test_reader_threads_reading_one_shard_at_once_get_their_own_samples(tmp_path):
  # grain reads with several threads; a shared file position would hand one thread's bytes to another.
  path = write_webdataset(str(tmp_path), {'web': 1}, samples_per_shard=40, side=32, broken=False)['web'][0]
  data = webdataset.TarShardRecords([path])
  want = [data[i][1] for i in range(len(data))]
  order = np.random.default_rng(0).integers(0, len(data), 4000)
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    got = list(pool.map(lambda i: data[int(i)][1], order))
  assert all(g['image'] == want[i]['image'] and g['caption'] == want[i]['caption'] for g, i in zip(got, order))
