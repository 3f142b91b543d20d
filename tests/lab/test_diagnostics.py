"""The diagnostics of lab/diagnostics/: caption duplicates in a batch (batch_duplicates.py), the background shift of
features (background_cue.py) and a batch's embedding spread (batch_spread.py)."""
import jax
import numpy as np
import pytest

from lab.diagnostics import batch_duplicates as dup
from lab.diagnostics.background_cue import background_shift, parse_runs
from lab.diagnostics.batch_spread import batch_statistics
from support import jit_init
from vlp_jax import models, objectives

def test_batch_duplicates_counts_rows_that_share_a_caption():
  assert dup.duplicated_fraction(['a', 'b', 'a', 'c']) == 0.5
  assert dup.duplicated_fraction(['a', 'b']) == 0.0
  pools = {'a': [f'a {i}' for i in range(100)], 'b': [f'b {i}' for i in range(100)],
           'templated': [f'template {i % 3}' for i in range(100)]}  # 3 captions, about 33 copies each
  result = dup.batch_duplicates(pools, batch_size=10, batches=400, seed=0)
  assert result['per_source']['a'] == result['per_source']['b'] == 0.0 and result['per_source']['templated'] > 0.9
  # a third of single-source batches are templated (about 1/3 x 0.97); a mixed batch holds ~3 templated rows
  assert 0.25 < result['single_source'] < 0.42 and result['mixed'] < result['single_source'] - 0.05


@pytest.mark.slow  # compiles the towers several times over
def test_batch_spread_statistics_of_a_batch_of_one_repeated_pair(micro):
  """A batch of one pair repeated has identical embeddings (cosine 1), no logit spread and the chance loss ln B; a
  batch of different pairs has less than cosine 1 and some spread."""
  objective = objectives.build(micro, models.build_model(micro.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))  # eager init compiles op by op
  rng = np.random.default_rng(0)
  size, length, batch = micro.model.vision.image_size, micro.model.text.context_length, 8
  images = rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8)
  texts = rng.integers(1, 1000, (batch, length)).astype(np.int32)
  repeated = batch_statistics(objective, params, state, {'image': np.repeat(images[:1], batch, 0),
                                                          'text': np.repeat(texts[:1], batch, 0)})
  assert abs(repeated['image_cosine'] - 1) < 1e-5 and repeated['logit_std'] < 1e-4
  assert abs(repeated['loss'] - np.log(batch)) < 1e-4
  different = batch_statistics(objective, params, state, {'image': images, 'text': texts})
  assert different['image_cosine'] < 0.999 and different['logit_std'] > 1e-3 and different['grad_norm'] > 0


def test_background_shift_is_zero_for_unmoved_features_and_one_for_another_scene():
  """Features that ignore the new background give 0; features of unrelated images give about 1 (as far apart as two
  different scenes); the features' norms do not matter."""
  rng = np.random.default_rng(0)
  features = rng.normal(size=(400, 16)) + 0.5
  assert background_shift(features, 3.0 * features) < 1e-12
  assert abs(background_shift(features, rng.normal(size=(400, 16)) + 0.5) - 1) < 0.1
  partly = features + rng.normal(size=features.shape)  # a shift between the two
  assert 0.1 < background_shift(features, partly) < 0.6
  with pytest.raises(ValueError, match=r'\(400, 16\) and \(400, 8\)'):
    background_shift(features, features[:, :8])
  assert parse_runs('clip=/a,slip=/b/c') == [('clip', '/a'), ('slip', '/b/c')]
  with pytest.raises(ValueError, match="--runs has '/a'"):
    parse_runs('/a')
