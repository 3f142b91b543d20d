"""An in-memory bucket behind `gs://` for unit tests: an fsspec filesystem registered for the gs and gcs schemes
(what etils.epath and vlp_jax.paths reach when TensorFlow is absent), so no test reaches a network. The real clients
against a GCS emulator are tests/integration/test_object_store_runs.py."""
from __future__ import annotations

import os

import fsspec
import pytest
from etils.epath import backend as epath_backend
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import _registry as fsspec_implementations
from orbax.checkpoint._src.path import gcs_utils


class FakeBucket(MemoryFileSystem):
  """An in-memory filesystem answering for gs:// (its own store, not MemoryFileSystem's shared one)."""
  protocol = ('gs', 'gcs')
  store: dict = {}
  pseudo_dirs: list = ['']

  @classmethod
  def _strip_protocol(cls, path):
    path = str(path)
    for prefix in ('gs://', 'gcs://'):
      path = path.removeprefix(prefix)
    return '/' + path.strip('/')


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """The fake bucket behind gs://, with the working directory in an empty tmp_path (where `os.path.abspath` would
  have put a `gs:` folder). Yields the store: {'/bkt/...': file}."""
  previous = {name: fsspec_implementations.get(name) for name in FakeBucket.protocol}
  for name in FakeBucket.protocol:
    fsspec.register_implementation(name, FakeBucket, clobber=True)
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  FakeBucket.store, FakeBucket.pseudo_dirs = {}, ['']
  FakeBucket.clear_instance_cache()
  monkeypatch.chdir(tmp_path)
  # orbax asks google-cloud-storage's client about the bucket's layout itself; a plain (flat) bucket, no network.
  monkeypatch.setattr(gcs_utils, 'is_hierarchical_namespace_enabled', lambda path: False)
  yield FakeBucket.store
  for name, cls in previous.items():  # gcsfs again (imported lazily when it was not yet)
    if cls is None:
      fsspec_implementations.pop(name, None)
    else:
      fsspec.register_implementation(name, cls, clobber=True)
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  assert os.listdir(tmp_path) == [], 'a gs:// path became a local folder'


def objects(store: dict) -> dict[str, bytes]:
  return {key: bytes(value.getbuffer()) for key, value in store.items()}


def upload(local_path: str, url: str) -> None:
  """Copy a local file into the bucket at `url` ('gs://bkt/...')."""
  with open(local_path, 'rb') as source, fsspec.open(url, 'wb') as target:
    target.write(source.read())
