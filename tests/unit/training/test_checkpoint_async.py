"""Asynchronous checkpointing: `save` returns before the files are written, safely, and the manifest follows."""
import time

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vlp_jax.training.checkpoint import MANIFEST, Checkpointer


def test_async_save_survives_donation_and_polls_its_manifest(tmp_path):
  iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
  assert [next(iterator) for _ in range(3)] == [0, 1, 2]
  checkpointer = Checkpointer(str(tmp_path), async_save=True)
  weights = jnp.arange(1000.0)
  checkpointer.save(5, {'w': weights}, iterator, ml_collections.ConfigDict({'seed': 1}))
  # The train step donates the state right after saving, and the data iterator moves on: neither may leak into
  # the files being written.
  weights.delete()
  assert next(iterator) == 3
  manifest = tmp_path / 'checkpoints' / '5' / MANIFEST
  deadline = time.time() + 60
  while not manifest.exists() and time.time() < deadline:
    checkpointer.poll()
    time.sleep(0.05)
  assert manifest.exists() and checkpointer.check(5) is None
  checkpointer.close()

  fresh = iter(grain.MapDataset.range(10).to_iter_dataset())
  reader = Checkpointer(str(tmp_path))
  assert reader.latest_complete_step() == 5
  abstract = {'w': jax.ShapeDtypeStruct((1000,), jnp.float32)}
  restored = reader.restore(5, abstract, fresh)
  np.testing.assert_array_equal(np.asarray(restored['w']), np.arange(1000.0))
  assert next(fresh) == 3  # the position at the save, not after it
  reader.close()


def test_close_finishes_an_async_save(tmp_path):
  iterator = iter(grain.MapDataset.range(4).to_iter_dataset())
  checkpointer = Checkpointer(str(tmp_path), async_save=True)
  checkpointer.save(1, {'w': jnp.ones(3)}, iterator, ml_collections.ConfigDict({}))
  checkpointer.close()  # no poll: close waits and writes the manifest
  assert (tmp_path / 'checkpoints' / '1' / MANIFEST).exists()
  assert Checkpointer(str(tmp_path)).latest_complete_step() == 1
