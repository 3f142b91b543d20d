"""Training data, teacher tables and exports on an object store (`gs://`, issue 61 item 1, the data side): webdataset
tars globbed, indexed and read by offset in the bucket; a remote teacher table copied once to the local cache and
mapped; remote inputs checked at start like local ones; ArrayRecord shards on gs:// refused at start; exports
uploaded. The bucket is tests/fake_bucket.py's in-memory filesystem (no network); local copies of the same files are
the reference each remote read must equal."""
from __future__ import annotations

import os
import pickle

import jax
import numpy as np
import pytest

from fake_bucket import bucket, objects, upload  # noqa: F401 (bucket: a fixture)
from support import write_webdataset
from vlp_jax import errors, models, paths
from vlp_jax.config import base_config
from vlp_jax.data import formats
from vlp_jax.data.loading import teacher_table as teacher
from vlp_jax.data.sources import webdataset_tars as webdataset
from vlp_jax.interchange import WeightsError, export_weights, save_checkpoint
from vlp_jax.training.loop import files_not_found


@pytest.fixture
def local_dir(tmp_path_factory):
  """A local folder outside the bucket fixture's working directory (which must stay empty)."""
  return tmp_path_factory.mktemp('local')


def _upload_shards(local_dir, bucket_folder='gs://bkt/web') -> tuple[list[str], list[str]]:
  """Two webdataset shards written locally (with bad samples) and uploaded: (local paths, their gs:// URLs)."""
  local = write_webdataset(str(local_dir), {'web': 2}, samples_per_shard=5)['web']
  remote = [f'{bucket_folder}/{os.path.basename(path)}' for path in local]
  for path, url in zip(local, remote):
    upload(path, url)
  return local, remote


def test_shard_patterns_on_gs_expand_there_and_name_their_source(bucket, local_dir):
  _, remote = _upload_shards(local_dir)
  upload(__file__, 'gs://bkt/web/notes.txt')  # not a tar: a folder's pattern takes only its *.tar
  assert webdataset.shard_paths('gs://bkt/web/*.tar') == remote
  assert webdataset.shard_paths('gs://bkt/web') == remote
  assert webdataset.shard_paths('gs://bkt/web/{00000..00001}.tar') == remote
  assert webdataset.source_folder('gs://bkt/web/{00000..00001}.tar') == 'gs://bkt/web'
  assert webdataset.source_folder('gs://bkt/web/') == 'gs://bkt/web'
  assert webdataset.parse_sources('gs://bkt/web/*.tar') == [('web', 'gs://bkt/web/*.tar')]


def test_a_gs_pattern_that_matches_nothing_is_refused_at_start(bucket, local_dir):
  _upload_shards(local_dir)
  data = base_config().data
  data.name, data.path = 'webdataset', 'gs://bkt/nothing/{00000..00003}.tar'
  with pytest.raises(errors.DataNotFoundError, match=r"'gs://bkt/nothing/\{00000..00003\}.tar' matches no tar"):
    formats.train_paths(data)
  data.path = 'gs://bkt/web/{00000..00001}.tar'
  assert formats.train_paths(data) == ['gs://bkt/web/00000.tar', 'gs://bkt/web/00001.tar']


def test_samples_read_from_gs_equal_the_local_reads_and_the_index_is_cached_locally(bucket, local_dir):
  local, remote = _upload_shards(local_dir)
  cache = str(local_dir / 'cache')
  expected = webdataset.TarShardRecords(local, cache_dir=str(local_dir / 'local_cache'))
  data = webdataset.TarShardRecords(remote, sources={url: 'web' for url in remote}, cache_dir=cache)
  assert len(data) == len(expected) == 10
  got, want = [data[i] for i in range(len(data))], [expected[i] for i in range(len(expected))]
  for (shard, example), (want_shard, want_example) in zip(got, want):
    assert shard == want_shard
    assert example == {**want_example, 'source': 'web'}
  assert {e.get('bad') for _, e in got} >= {'missing_image', 'missing_caption'}  # the broken samples, named
  # The shards' indexes are cached in the local cache folder, one per shard, and reused: not in the bucket.
  cached = [os.path.join(d, f) for d, _, files in os.walk(os.path.join(cache, 'webdataset_index')) for f in files
            if f.endswith('.npz')]
  assert len(cached) == 2
  assert set(objects(bucket)) == {'/bkt/web/00000.tar', '/bkt/web/00001.tar'}
  mtimes = [os.stat(path).st_mtime_ns for path in cached]
  again = pickle.loads(pickle.dumps(webdataset.TarShardRecords(remote, cache_dir=cache)))  # as a grain worker
  assert [os.stat(path).st_mtime_ns for path in cached] == mtimes
  assert [again[i][1]['key'] for i in range(len(again))] == [e['key'] for _, e in want]
  assert again[4][1]['image'] == expected[4][1]['image']


def test_a_truncated_tar_on_gs_is_read_up_to_its_cut(bucket, local_dir):
  local, _ = _upload_shards(local_dir)
  with open(local[1], 'rb') as f:
    whole = f.read()
  cut = str(local_dir / 'cut.tar')
  with open(cut, 'wb') as f:
    f.write(whole[:len(whole) // 2])
  upload(cut, 'gs://bkt/cut/00000.tar')
  want, got = (webdataset.load_index(path, webdataset.Fields()) for path in (cut, 'gs://bkt/cut/00000.tar'))
  assert got.truncation == want.truncation != ''
  np.testing.assert_array_equal(got.rows, want.rows)
  np.testing.assert_array_equal(got.keys, want.keys)


def _write_table(path: str) -> np.ndarray:
  embeddings = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
  np.savez(path, keys=np.array(['b', 'a', 'd', 'c']), image_embeddings=embeddings)
  return embeddings


def test_a_teacher_table_on_gs_is_copied_once_to_the_local_cache_and_mapped(bucket, local_dir):
  local = str(local_dir / 'teacher.npz')
  embeddings = _write_table(local)
  upload(local, 'gs://bkt/teacher.npz')
  cache = str(local_dir / 'cache')
  directory = teacher.prepare_table('gs://bkt/teacher.npz', cache)
  assert directory.startswith(cache) and teacher.prepare_table('gs://bkt/teacher.npz', cache) == directory
  table = teacher.load_table(directory)
  for key, row in zip('badc', embeddings):
    np.testing.assert_array_equal(table[key], row)
  assert isinstance(table.embeddings, np.memmap) and table.embeddings.filename.startswith(os.path.realpath(cache))
  copies = os.listdir(os.path.join(cache, 'teacher_tables', 'copies'))
  assert len(copies) == 1  # copied once


def test_remote_inputs_that_do_not_exist_are_named_at_start(bucket, local_dir):
  config = base_config()
  config.data.teacher_embeddings = 'gs://bkt/missing.npz'
  config.init.checkpoint = 'gs://bkt/no_run'
  assert files_not_found(config) == ["config.data.teacher_embeddings='gs://bkt/missing.npz' does not exist",
                                     "config.init.checkpoint='gs://bkt/no_run' does not exist"]
  _write_table(str(local_dir / 'teacher.npz'))
  upload(str(local_dir / 'teacher.npz'), 'gs://bkt/present.npz')
  config.data.teacher_embeddings, config.init.checkpoint = 'gs://bkt/present.npz', ''
  assert files_not_found(config) == []


def test_a_remote_input_whose_client_is_missing_is_named_with_what_to_install(monkeypatch):
  def without_gcsfs(path):
    raise ImportError('Install gcsfs to access Google Storage')  # what fsspec raises when gcsfs is missing
  monkeypatch.setattr(paths, 'exists', without_gcsfs)
  config = base_config()
  config.data.teacher_embeddings = 'gs://bkt/teacher.npz'
  assert files_not_found(config) == ["config.data.teacher_embeddings='gs://bkt/teacher.npz' cannot be checked: "
                                     'Install gcsfs to access Google Storage']


def test_array_record_shards_on_gs_are_refused_at_start_with_what_to_do_instead(bucket):
  data = base_config().data
  data.name, data.path = 'array_record', 'gs://bkt/shards'
  with pytest.raises(errors.ConfigError) as raised:
    formats.train_paths(data)
  message = str(raised.value)
  assert "config.data.path entry 'gs://bkt/shards'" in message and 'object store' in message
  assert 'config.data.name=webdataset' in message and 'mount' in message
  assert errors.exit_code(raised.value) == 2


def _tiny_checkpoint(directory: str) -> str:
  model = models.preset('tiny')
  model.update(embed_dim=16)
  model.vision.update(image_size=16, patch_size=8, width=16, layers=1, heads=2)
  model.text.update(context_length=12, width=16, layers=1, heads=2)
  params, state = models.init_variables(models.build_model(model), jax.random.key(0))
  config = base_config()
  config.model = model
  return save_checkpoint(directory, jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state), config)


@pytest.mark.slow
def test_exports_to_gs_land_in_the_bucket_as_the_local_export(bucket, local_dir):
  checkpoint = _tiny_checkpoint(str(local_dir / 'ckpt'))
  local_weights = export_weights('open_clip', checkpoint, str(local_dir / 'oc.safetensors'))
  local_folder = export_weights('hf', checkpoint, str(local_dir / 'hf'))
  assert export_weights('open_clip', checkpoint, 'gs://bkt/out/oc.safetensors') == 'gs://bkt/out/oc.safetensors'
  assert export_weights('hf', checkpoint, 'gs://bkt/out/hf/') == 'gs://bkt/out/hf'
  stored = objects(bucket)
  with open(local_weights, 'rb') as f:
    assert stored['/bkt/out/oc.safetensors'] == f.read()
  with open(local_weights[:-len('.safetensors')] + '.json', 'rb') as f:
    assert stored['/bkt/out/oc.json'] == f.read()
  for name in os.listdir(local_folder):
    with open(os.path.join(local_folder, name), 'rb') as f:
      assert stored[f'/bkt/out/hf/{name}'] == f.read(), name
  assert len([key for key in stored if key.startswith('/bkt/out/hf/')]) == len(os.listdir(local_folder))
  with pytest.raises(Exception, match='exists; pass --overwrite'):
    export_weights('open_clip', checkpoint, 'gs://bkt/out/oc.safetensors')


def test_an_imported_checkpoint_is_not_written_to_a_local_folder_named_after_a_bucket(tmp_path, monkeypatch):
  """`weights import --output=s3://...`: refused (orbax writes arrays to local paths and gs:// only), where it
  became the local folder ./s3:/bkt/ckpt."""
  monkeypatch.chdir(tmp_path)
  with pytest.raises(WeightsError, match=r'--output=s3://bkt/ckpt: s3:// cannot hold checkpoints.*gs://'):
    _tiny_checkpoint('s3://bkt/ckpt')
  assert os.listdir(tmp_path) == []


def test_a_remote_sample_costs_one_ranged_request(bucket, local_dir, monkeypatch):
  """Per-request latency dominates on an object store: a sample's caption and image, adjacent in the tar, come from
  one ranged read spanning both, and nothing else is read."""
  _, remote = _upload_shards(local_dir)
  data = webdataset.TarShardRecords(remote, cache_dir=str(local_dir / 'cache'))
  requests = []
  read_range = paths.read_range
  monkeypatch.setattr(paths, 'read_range', lambda *args: requests.append(args) or read_range(*args))
  examples = [data[i][1] for i in range(len(data))]
  whole = [e for e in examples if 'bad' not in e]
  assert len(whole) == 8 and len(requests) == len(whole)
  # each request reads no more than its sample's members, their headers and the JSON member between them
  assert all(size < len(e['image']) + len(e['caption'].encode()) + 2048 for (_, _, size), e in zip(requests, whole))
