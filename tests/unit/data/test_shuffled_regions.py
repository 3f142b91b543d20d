"""data.synthetic.shuffle_regions: each train record of the embedded dataset carries another train record's regions
(a fixed derangement), the eval sets keep their own, and the default changes no record."""
import numpy as np
import pytest

from vlp_jax.config import base_config, validate
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.errors import ConfigError

SOURCES = ('studio', 'web')


def _data(tmp_path, **synthetic_options):
  """config.data of a small embedded dataset with regions in tmp_path."""
  data = base_config().data
  data.cache_dir = str(tmp_path)
  data.synthetic.update(resolution=16, num_train=7, num_val=3, num_test=2, sources=SOURCES, shards=1, regions=True,
                        **synthetic_options)
  return data


def _read(data, split, source):
  return pipeline.read_all([p for p in synthetic.config_split_paths(data, split) if f'/{source}/' in p])


@pytest.mark.parametrize('count', [2, 3, 10, 101])
def test_derangement_moves_every_record_and_gives_none_twice(count):
  pi = synthetic.regions_derangement(0, 'web', count)
  assert sorted(pi.tolist()) == list(range(count))
  assert not np.any(pi == np.arange(count))
  np.testing.assert_array_equal(pi, synthetic.regions_derangement(0, 'web', count))  # fixed by seed and source
  if count > 3:
    assert not np.array_equal(pi, synthetic.regions_derangement(1, 'web', count))
    assert not np.array_equal(pi, synthetic.regions_derangement(0, 'studio', count))


def test_train_records_carry_the_regions_of_record_pi_and_nothing_else_changes(tmp_path):
  shuffled, true = _data(tmp_path, shuffle_regions=True), _data(tmp_path)
  for source in SOURCES:
    pi = synthetic.regions_derangement(0, source, 7)
    own, moved = _read(true, 'train', source), _read(shuffled, 'train', source)
    assert len(moved) == len(own) == 7
    for i, (a, b) in enumerate(zip(own, moved)):
      assert b['regions'] == own[pi[i]]['regions'] != a['regions'], (source, i)
      assert {k: v for k, v in b.items() if k != 'regions'} == {k: v for k, v in a.items() if k != 'regions'}
    for split in ('val', 'test'):  # the eval splits keep every record's own regions
      assert [records.serialize(e) for e in _read(shuffled, split, source)] == \
             [records.serialize(e) for e in _read(true, split, source)]


def test_eval_sets_read_the_true_regions_and_the_default_changes_no_record(tmp_path):
  shuffled = _data(tmp_path, shuffle_regions=True)
  # the eval sets (and the referring probe's train split) read spec_from_config's copy: the true one
  assert not synthetic.spec_from_config(shuffled).shuffle_regions
  default = synthetic.SyntheticSpec(regions=True)
  assert default.digest() == 'b400a3ce1144'  # the cache of before the option existed
  spec = synthetic.spec_from_config(_data(tmp_path))
  root = synthetic.ensure_dataset(spec, str(tmp_path), verbose=False)
  for source in SOURCES:
    written = pipeline.read_all(synthetic.shard_paths(root, 'train', (source,)))
    made = [synthetic.make_example(0, 'train', source, i, 16, regions=True) for i in range(7)]
    assert [records.serialize(e) for e in written] == [records.serialize(e) for e in made]


def test_shuffle_regions_needs_regions(tmp_path):
  config = base_config()
  config.data.synthetic.shuffle_regions = True
  with pytest.raises(ConfigError, match='data.synthetic.shuffle_regions.*data.synthetic.regions is False'):
    validate(config)
  config.data.synthetic.regions = True
  validate(config)
  with pytest.raises(ValueError, match='shuffle_regions needs regions=True'):
    synthetic.ensure_dataset(synthetic.SyntheticSpec(shuffle_regions=True), str(tmp_path), verbose=False)
