"""Reading a checkpoint (checkpoint_files.py) logs nothing a user has to act on: orbax's warning about the item
metadata a composite save keeps one level up is dropped, and only that one."""
import logging

import grain
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging as absl_logging

from vlp_jax.checkpoint_files import MissingItemMetadataFilter, has_ema, load_variables
from vlp_jax.training.checkpoint import Checkpointer


def test_loading_a_checkpoint_logs_no_metadata_warning_and_other_orbax_warnings_still_show(tmp_path, caplog):
  checkpointer = Checkpointer(str(tmp_path))
  state = {'params': {'w': jnp.arange(3.0)}, 'model_state': {}}
  checkpointer.save(1, state, iter(grain.MapDataset.range(4).to_iter_dataset()), ml_collections.ConfigDict({}))
  checkpointer.close()
  with caplog.at_level(logging.INFO):
    params, _ = load_variables(str(tmp_path))
    assert not has_ema(str(tmp_path))
  np.testing.assert_array_equal(params['w'], np.arange(3.0))
  assert not [r for r in caplog.records if 'Metadata file does not exist' in r.getMessage()]
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
  # The filter is that message from orbax's files: the same words from elsewhere, and orbax's other warnings, pass.
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    absl_logging.warning('Metadata file does not exist: %s', 'elsewhere')
  assert [r.getMessage() for r in caplog.records] == ['Metadata file does not exist: elsewhere']


def test_the_filter_drops_only_orbaxs_missing_metadata_message():
  def record(pathname, message):
    return logging.LogRecord('absl', logging.WARNING, pathname, 1, message, ('/x',), None)

  orbax_file = '/site-packages/orbax/checkpoint/_src/metadata/checkpoint.py'
  keep = MissingItemMetadataFilter().filter
  assert not keep(record(orbax_file, 'Metadata file does not exist: %s'))
  assert keep(record(orbax_file, 'Failed to read Metadata file: %s'))
  assert keep(record('/home/me/mine.py', 'Metadata file does not exist: %s'))
