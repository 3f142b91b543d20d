"""Staged resolution's parts (data/image/resolution_stages.py, training/stages.py, the views): the schedule and its
validation, the image size an example gets from its step, and the state's resize at a switch (Adam's second moment
linearly, so that it stays positive). The run itself: tests/integration/test_resolution_stages.py."""
import numpy as np
import optax
import pytest

from vlp_jax import models
from vlp_jax.config import ConfigError, base_config, validate
from vlp_jax.data.loading.pipeline import STEP_KEY
from vlp_jax.models.resize import resize_position_embedding
from vlp_jax.objectives.views import ClipViews
from vlp_jax.training import stages


def _staged(stages_=((0.0, 16), (0.75, 32))):
  config = base_config()  # the tiny model: 32 px, patch 8
  config.total_steps = 8
  config.data.resolution_stages = stages_
  return config


def test_the_schedule_by_batch_and_the_state_of_each_step():
  config = _staged()
  assert stages.stage_starts(config) == ((0, 16), (6, 32))
  assert [stages.size_at(config, i) for i in range(8)] == [16] * 6 + [32] * 2
  assert [i for i in range(8) if stages.switches_at(config, i)] == [6]
  # a state after 6 updates has seen batches 0-5: still 16 px (the switch comes with batch 6)
  assert stages.state_config(config, 6).model.vision.image_size == 16
  assert stages.state_config(config, 7) is config and stages.state_config(config, 0).model.vision.image_size == 16
  assert config.model.vision.image_size == 32  # the run's config is not changed
  validate(config)


@pytest.mark.parametrize('value,message', [
    (((0.1, 16), (0.75, 32)), 'the fractions must start at 0.0 and rise within'),
    (((0.0, 16), (0.75, 24)), r'the last stage must be at config.model.vision.image_size=32'),
    (((0.0, 12), (0.75, 32)), r'image sizes \[12\] are not positive multiples of config.model.vision.patch_size=8'),
    (((0.0, 16), (0.01, 32)), 'two stages start at the same step'),
    (((0.0,), (0.75, 32)), 'must be pairs'),
])
def test_a_bad_schedule_is_refused_naming_the_key(value, message):
  with pytest.raises(ConfigError, match=r'config.data.resolution_stages=.*' + message):
    validate(_staged(value))


def test_objectives_and_towers_without_a_staged_resolution_are_refused():
  config = _staged()
  config.objective.name = 'slip'
  with pytest.raises(ConfigError, match=r"applies to config.objective.name in \['clip', 'siglip'\], not 'slip'"):
    validate(config)
  config = _staged(((0.0, 112), (0.75, 224)))
  config.model = models.preset('RN50')
  with pytest.raises(ConfigError, match=r"position embedding can be resized, not config.model.vision.type='resnet'"):
    validate(config)


def test_an_example_gets_the_image_size_of_its_step():
  views = ClipViews(32, 16, size_stages=((0, 16), (6, 32)))
  image = np.random.default_rng(0).integers(0, 255, (40, 48, 3), np.uint8)
  size = lambda example: views.random_map(example, np.random.default_rng(1))['image'].shape  # noqa: E731
  assert size({'image': image, 'caption': 'a', 'label': 0, STEP_KEY: 5}) == (16, 16, 3)
  assert size({'image': image, 'caption': 'a', 'label': 0, STEP_KEY: 6}) == (32, 32, 3)
  assert size({'image': image, 'caption': 'a', 'label': 0}) == (32, 32, 3)  # outside the pipeline: the model's size


def test_the_switch_resizes_every_copy_of_the_position_embedding_and_keeps_adams_second_moment_positive():
  config = _staged()
  small, large = stages.config_at(config, 0).model.vision, config.model.vision  # grids 2x2 -> 4x4, class token
  rng = np.random.default_rng(0)
  pos = rng.normal(size=(5, 4)).astype(np.float32)
  nu = np.zeros((5, 4), np.float32)
  nu[1 + 1] = 1.0  # one patch with a large second moment: bicubic's negative lobes take its neighbours below 0
  adam = optax.ScaleByAdamState(count=np.int32(3), mu={'visual': {'positional_embedding': pos * 0.1}},
                                nu={'visual': {'positional_embedding': nu}})
  other = rng.normal(size=(3,)).astype(np.float32)
  state = {'params': {'visual': {'positional_embedding': pos, 'other': other}}, 'opt_state': (adam,),
           'model_state': {'teacher': {'visual': {'positional_embedding': pos}}}}
  resized, count = stages.resize_state(state, small, large)
  assert count == 4
  want = resize_position_embedding(pos, 2, 4, 1)
  np.testing.assert_array_equal(resized['params']['visual']['positional_embedding'], want)
  np.testing.assert_array_equal(resized['model_state']['teacher']['visual']['positional_embedding'], want)
  np.testing.assert_array_equal(resized['opt_state'][0].mu['visual']['positional_embedding'],
                                resize_position_embedding(pos * 0.1, 2, 4, 1))
  assert resize_position_embedding(nu, 2, 4, 1).min() < 0  # what a bicubic second moment would be
  resized_nu = resized['opt_state'][0].nu['visual']['positional_embedding']
  np.testing.assert_array_equal(resized_nu, resize_position_embedding(nu, 2, 4, 1, method='linear'))
  assert resized_nu.shape == (17, 4) and resized_nu.min() >= 0 and resized_nu.max() > 0
  assert resized['params']['visual']['other'] is other and int(resized['opt_state'][0].count) == 3
