"""Single-source (debiased) and sequential batches: one source per global batch, drawn in proportion to size with
the same draw on every host, per-process slices of the same global batches, exact resumption."""
import dataclasses
import pickle

import grain
import numpy as np
import pytest

from vlp_jax.data.formats import train_paths
from vlp_jax.data.loading import mixing, pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic


@dataclasses.dataclass
class SourceAndIndex(grain.transforms.RandomMap):
  """Just enough of an example to check the order: its source (as an index) and its index in that source."""

  def random_map(self, example, rng):
    del rng
    source, _, index = example['key'].split('/')
    return {'source': np.int32(synthetic.SOURCES.index(source)), 'index': np.int32(index)}


def _iterator(config, mode, process_index=0, process_count=1, batch_size=8, paths=None, weights=''):
  paths = paths or train_paths(config.data)
  return pipeline.train_iterator(paths, SourceAndIndex(), pipeline.PipelineSettings(seed=7,
                                 global_batch_size=batch_size, process_index=process_index, process_count=process_count,
                                 mixing=mode, source_weights=weights))


def _take(iterator, n):
  batches = [next(iterator) for _ in range(n)]
  return np.stack([b['source'] for b in batches]), np.stack([b['index'] for b in batches])


def test_sources_are_drawn_in_proportion_to_size():
  sizes = [1000, 3000, 6000]
  drawn = mixing.draw_sources(3, np.arange(20000), sizes)
  np.testing.assert_allclose(np.bincount(drawn) / len(drawn), [0.1, 0.3, 0.6], atol=0.01)
  # Counter-based: any batch's draw is a function of (seed, batch) alone, whichever batches are asked for.
  np.testing.assert_array_equal(mixing.draw_sources(3, np.arange(19990, 20000), sizes), drawn[-10:])
  assert not np.array_equal(mixing.draw_sources(4, np.arange(100), sizes), drawn[:100])


def test_selection_map_ranks_count_each_sources_batches_and_survive_pickling():
  schedule = mixing.SourceBatches([500, 100, 400], batch_size=4, mode='single_source', seed=0)
  n = 2 * mixing._CHUNK + 100  # crosses chunk boundaries
  pairs = [schedule.batch_source(b) for b in range(n)]
  sources = np.array([s for s, _ in pairs])
  for s in range(3):  # the k-th batch of source s has rank k: each source's stream is read in order, no gaps
    np.testing.assert_array_equal([r for src, r in pairs if src == s], np.arange(np.sum(sources == s)))
  # A fresh (or unpickled) map, asked out of order, as a resumed or second host would: the same answers.
  fresh = pickle.loads(pickle.dumps(schedule))
  for b in (n - 1, 5, mixing._CHUNK + 3):
    assert fresh.batch_source(b) == pairs[b]
  assert schedule[4 * 7 + 2] == (pairs[7][0], pairs[7][1] * 4 + 2)


def test_sequential_walks_each_source_in_turn_and_cycles():
  schedule = mixing.SourceBatches([9, 4, 13], batch_size=4, mode='sequential', seed=0)  # 2, 1, 3 batches an epoch
  got = [schedule.batch_source(b) for b in range(12)]
  epoch = [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
  assert got == epoch + [(s, r + {0: 2, 1: 1, 2: 3}[s]) for s, r in epoch]


@pytest.mark.parametrize('mode', ['single_source', 'sequential'])
def test_every_global_batch_has_one_source(micro, mode):
  sources, indices = _take(_iterator(micro, mode), 24)
  assert (sources == sources[:, :1]).all()
  assert len(set(sources[:, 0])) == 3  # all three sources take part
  # The first 64 / 8 = 8 batches of a source cover it exactly once (its shuffled pass).
  first_pass = [indices[sources[:, 0] == s][:8] for s in range(3)]
  assert any(len(b) == 8 for b in first_pass)  # (with seed 7, sketch has 11 of the first 24 batches)
  for batches in first_pass:
    assert len(np.unique(batches)) == batches.size
    if len(batches) == 8:
      assert sorted(batches.ravel()) == list(range(64))
  if mode == 'sequential':  # studio's 8 batches, then web's, then sketch's
    np.testing.assert_array_equal(sources[:, 0], np.repeat([0, 1, 2], 8))


def test_sources_appear_in_proportion_to_their_shards(micro):
  paths = train_paths(micro.data)  # two shards of 32 per source; drop one of web's: 64 : 32 : 64
  paths = [p for p in paths if not (f'{synthetic.SOURCES[1]}/' in p and 'train-00001' in p)]
  assert len(paths) == 5
  schedule = mixing.SourceBatches([64, 32, 64], 8, 'single_source', seed=7)
  sources, _ = _take(_iterator(micro, 'single_source', paths=paths), 20)
  np.testing.assert_array_equal(sources[:, 0], [schedule.batch_source(b)[0] for b in range(20)])
  drawn = np.bincount(mixing.draw_sources(7, np.arange(5000), [64, 32, 64])) / 5000
  np.testing.assert_allclose(drawn, [0.4, 0.2, 0.4], atol=0.02)


def test_weighted_mixing_draws_each_example_by_the_weights(micro):
  """Sources mix inside batches, with frequencies that converge to the given weights (not to the sizes, 1:1:1)."""
  sources, indices = _take(_iterator(micro, 'weighted', weights='studio=1,web=0,sketch=3'), 60)
  np.testing.assert_allclose(np.bincount(sources.ravel(), minlength=3) / sources.size, [0.25, 0, 0.75], atol=0.04)
  assert any(len(set(row)) > 1 for row in sources)
  studio = indices[sources == 0][:64]  # each source's stream is a reshuffled pass: no repeats within a pass
  assert len(np.unique(studio)) == len(studio)
  drawn = np.bincount(mixing.draw_sources(3, np.arange(40000), [1, 0, 3]), minlength=3) / 40000
  np.testing.assert_allclose(drawn, [0.25, 0.0, 0.75], atol=0.01)


def test_single_source_batches_follow_given_weights(micro):
  sources, _ = _take(_iterator(micro, 'single_source', weights='studio=0,web=1,sketch=1'), 40)
  assert (sources == sources[:, :1]).all()
  assert 0 not in sources and abs(np.mean(sources[:, 0] == 1) - 0.5) < 0.2


def test_two_processes_see_slices_of_the_same_global_batches(micro):
  whole = _take(_iterator(micro, 'single_source'), 6)
  parts = [_take(_iterator(micro, 'single_source', p, 2), 6) for p in range(2)]
  for k in range(2):  # process p holds block p (elements 4p .. 4p + 3) of every global batch
    np.testing.assert_array_equal(np.concatenate([parts[0][k], parts[1][k]], -1), whole[k])


def test_resumes_exactly(micro):
  it = _iterator(micro, 'single_source')
  _take(it, 5)
  state = it.get_state()
  expected = _take(it, 10)
  fresh = _iterator(micro, 'single_source')
  fresh.set_state(state)
  for got, want in zip(_take(fresh, 10), expected):
    np.testing.assert_array_equal(got, want)


def test_mixed_is_unchanged_and_mixes_sources(micro):
  paths = train_paths(micro.data)
  default = pipeline.train_iterator(paths, SourceAndIndex(), pipeline.PipelineSettings(seed=7, global_batch_size=8,
                                    process_index=0, process_count=1))
  want = _take(default, 4)
  got = _take(_iterator(micro, 'mixed'), 4)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1], want[1])
  assert any(len(set(row)) > 1 for row in got[0])


def test_bad_inputs_name_the_problem(micro):
  with pytest.raises(ValueError, match=r"data.mixing='shuffled'.*single_source"):
    _iterator(micro, 'shuffled')
  with pytest.raises(ValueError, match='fewer examples'):
    _iterator(micro, 'single_source', batch_size=128)
  paths = train_paths(micro.data)
  with pytest.raises(ValueError, match='2 shard sources for 6 shards'):
    mixing.mixed_sources_dataset(paths, ['studio', 'web'], mode='single_source', seed=0, global_batch_size=8)
  assert mixing.shard_sources(paths) == [s for s in synthetic.SOURCES for _ in range(2)]
  with pytest.raises(ValueError, match=r"unknown \['cc3m'\]; no weight for \['sketch'\]"):
    _iterator(micro, 'weighted', weights='studio=1,web=1,cc3m=2')
  with pytest.raises(ValueError, match='needs data.source_weights'):
    _iterator(micro, 'weighted')
  with pytest.raises(ValueError, match="does not apply to data.mixing='sequential'"):
    _iterator(micro, 'sequential', weights='studio=1,web=1,sketch=1')
