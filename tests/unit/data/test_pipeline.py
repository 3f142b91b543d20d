"""The grain pipeline: batch layout, exact resumption from the iterator state, per-process slicing, and processes
that read their own shards (data.shards_by_process)."""
import jax
import pytest
import numpy as np

from vlp_jax.objectives.views import ClipViews
from vlp_jax.data import formats
from vlp_jax.data.image import image_ops
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records


def _iterator(config, process_index=0, process_count=1, num_workers=0, own_shards=False, mixing='mixed'):
  paths = formats.train_paths(config.data)
  views = ClipViews(config.model.vision.image_size, config.model.text.context_length)
  shard_ids = pipeline.process_shards(len(paths), process_index, process_count) if own_shards else None
  return pipeline.train_iterator(paths, views, pipeline.PipelineSettings(seed=7, global_batch_size=8,
                                 process_index=process_index, process_count=process_count, num_workers=num_workers,
                                 mixing=mixing), shard_ids=shard_ids)


def test_batches_have_model_ready_arrays(micro):
  batch = next(_iterator(micro))
  # images travel as uint8 (a quarter of the bytes) and are normalised in the train step
  assert batch['image'].shape == (8, 16, 16, 3) and batch['image'].dtype == np.uint8
  assert batch['text'].shape == (8, 16) and batch['text'].dtype == np.int32
  assert (batch['text'][:, 0] == 49406).all() and (batch['text'].argmax(1) > 0).all()
  assert batch['label'].shape == (8,)


def test_uint8_images_are_normalised_on_the_device_as_on_the_host(micro):
  batch, _ = pipeline.pop_status(next(_iterator(micro)))  # the status fields stay on the host
  on_device = jax.jit(image_ops.images_to_float)(batch)
  assert on_device['image'].dtype == np.float32 and on_device['text'].dtype == np.int32
  # the eval sets' host normalisation, in float64 from the CLIP mean and std
  want = (batch['image'] / 255.0 - np.float64(image_ops.OPENAI_MEAN)) / np.float64(image_ops.OPENAI_STD)
  np.testing.assert_allclose(np.asarray(on_device['image']), want, atol=2e-6)
  np.testing.assert_allclose(np.asarray(on_device['image']), image_ops.normalize_image(batch['image']), atol=5e-7)
  np.testing.assert_array_equal(np.asarray(on_device['text']), batch['text'])
  crops = np.stack([batch['image'], batch['image'][::-1]], axis=1)  # [B, crops, H, W, 3], as COSMOS's views
  np.testing.assert_allclose(np.asarray(jax.jit(image_ops.images_to_float)({'global_images': crops})['global_images']),
                             image_ops.normalize_image(crops), atol=5e-7)
  already_float = {'image': image_ops.normalize_image(batch['image'])}
  np.testing.assert_array_equal(image_ops.images_to_float(already_float)['image'], already_float['image'])


def test_a_uint8_entry_that_is_not_an_image_is_named():
  with pytest.raises(ValueError, match=r"batch\['mask'\] is uint8 with shape \(8, 16\)"):
    image_ops.images_to_float({'mask': np.zeros((8, 16), np.uint8)})


def test_iterator_state_restores_exactly(micro):
  it = _iterator(micro)
  for _ in range(3):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(4)]
  fresh = _iterator(micro)
  fresh.set_state(state)
  for want in expected:
    got = next(fresh)
    np.testing.assert_array_equal(got['image'], want['image'])
    np.testing.assert_array_equal(got['text'], want['text'])


def test_epochs_are_reshuffled_and_cover_the_data(micro):
  it = _iterator(micro)
  per_epoch = 3 * 64 // 8  # three sources of 64 training examples
  epochs = [np.concatenate([next(it)['text'] for _ in range(per_epoch)]) for _ in range(2)]
  assert not np.array_equal(epochs[0], epochs[1])
  assert sorted(map(bytes, epochs[0])) == sorted(map(bytes, epochs[1]))


def test_processes_read_blocks_of_one_global_order(micro):
  """Process p reads rows [4p, 4p + 4) of every global batch of 8: concatenated in process order, the local
  batches are the single-process batches, row for row, step after step."""
  whole = _iterator(micro)
  parts = [_iterator(micro, p, 2) for p in range(2)]
  for _ in range(3):
    local = [next(it) for it in parts]
    assert all(len(p['label']) == 4 for p in local)
    expected = next(whole)
    for key in ('text', 'label', 'image'):
      np.testing.assert_array_equal(np.concatenate([p[key] for p in local]), expected[key])


@pytest.mark.slow
def test_worker_processes_give_the_same_batches_and_resume(micro):
  inline, workers = _iterator(micro), _iterator(micro, num_workers=2)
  for _ in range(3):
    np.testing.assert_array_equal(next(inline)['text'], next(workers)['text'])
  state = workers.get_state()
  expected = next(workers)
  resumed = _iterator(micro, num_workers=2)
  resumed.set_state(state)
  np.testing.assert_array_equal(next(resumed)['image'], expected['image'])


def test_clip_views_random_crop_and_randaugment_are_seeded_per_example():
  example = pipeline.DecodeRecord().map(records.serialize(synthetic.make_example(0, 'train', 'studio', 3, 32)))
  centre = ClipViews(24, 16)
  augmented = ClipViews(24, 16, crop_scale=(0.3, 0.6), augment='randaugment')
  view = lambda views, seed: views.random_map(example, np.random.default_rng(seed))['image']  # noqa: E731
  np.testing.assert_array_equal(view(centre, 0), view(centre, 1))  # the eval view ignores the generator
  np.testing.assert_array_equal(view(augmented, 5), view(augmented, 5))
  assert not np.array_equal(view(augmented, 5), view(augmented, 6))
  assert view(augmented, 5).shape == view(centre, 0).shape == (24, 24, 3)


def test_processes_with_their_own_shards_read_nothing_else_and_resume_exactly(micro):
  paths = formats.train_paths(micro.data)
  owned = [pipeline.process_shards(len(paths), p, 2) for p in range(2)]
  assert sorted(owned[0] + owned[1]) == list(range(len(paths))) and not set(owned[0]) & set(owned[1])
  for p in range(2):
    it = _iterator(micro, p, 2, own_shards=True)
    batches = [pipeline.pop_status(next(it)) for _ in range(6)]
    assert all(len(b['label']) == 4 for b, _ in batches)  # the local share of the global batch of 8
    read = set(np.concatenate([status['record_shard'] for _, status in batches]).tolist())
    assert read == set(owned[p])  # every one of its own shards, and no other
    state = it.get_state()
    expected = [next(it) for _ in range(2)]
    resumed = _iterator(micro, p, 2, own_shards=True)
    resumed.set_state(state)
    for want in expected:
      np.testing.assert_array_equal(next(resumed)['image'], want['image'])
  # One process reads every shard: the same batches as without the option
  np.testing.assert_array_equal(next(_iterator(micro, own_shards=True))['text'], next(_iterator(micro))['text'])


def test_own_shards_need_as_many_shards_as_processes_and_mixed_batches(micro):
  with pytest.raises(ValueError, match='there are 3 shards for 4 processes'):
    pipeline.process_shards(3, 0, 4)
  with pytest.raises(ValueError, match="not 'single_source'"):
    _iterator(micro, 0, 2, own_shards=True, mixing='single_source')
