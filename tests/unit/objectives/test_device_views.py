"""config.data.augment_on='device' for COSMOS, SLIP and SigLIP 2: the host's views leave the crops to the step, with
the same draws (so the text and everything drawn after the images are unchanged), `Objective.prepared` renders them
(also under a term), and the config refuses what it cannot do; SigLIP 2's views only from its switch."""
import chex
import jax
import numpy as np
import pytest

from vlp_jax import models, objectives
from vlp_jax.config import ConfigError, validate, with_term
from vlp_jax.data.image import device_augment
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.loading.pipeline import DecodeRecord

# objective -> (its options for a small run, the image views it makes)
METHODS = {'cosmos': ({'num_local_crops': 2, 'num_local_texts': 2, 'local_crop_size': 8,
                       'local_text_context_length': 8, 'cross_attention_heads': 4}, ('global_images', 'local_images')),
           'slip': ({'head_mlp_dim': 16, 'head_out_dim': 8}, ('image', 'ssl_a', 'ssl_b')),
           'siglip2': ({'num_local_crops': 2, 'local_crop_size': 8, 'head_hidden_dim': 16, 'head_bottleneck_dim': 8,
                        'head_prototypes': 16}, ('global_view', 'local_views'))}


def _config(micro, name, augment_on):
  micro.objective.name = name
  micro.objective.update(METHODS[name][0])
  micro.data.augment_on = augment_on
  micro.data.device_source_size = 32
  return micro


def _batch(config, size=4):
  views = objectives.OBJECTIVES.get(config.objective.name).views(config)
  decode, rng = DecodeRecord(), np.random.default_rng(0)
  examples = [views.random_map(decode.map(records.serialize(synthetic.make_example(0, 'train', 'studio', i, 16))),
                               rng) for i in range(size)]
  return {k: np.stack([e[k] for e in examples]) for k in examples[0]}


@pytest.mark.parametrize('name', sorted(METHODS))
def test_device_views_are_the_host_views_rendered_in_the_step(micro, name):
  host_config = _config(micro, name, 'host')
  device_config = _config(micro.copy_and_resolve_references(), name, 'device')
  validate(device_config)
  host, device = _batch(host_config), _batch(device_config)
  image_keys = METHODS[name][1]
  assert device[device_augment.SOURCE_KEY].shape == (4, 32, 32, 3) and not set(image_keys) & set(device)
  for key in set(host) - set(image_keys):  # texts, labels: the same draws
    np.testing.assert_array_equal(device[key], host[key], err_msg=key)
  objective = objectives.build(with_term(device_config, 'saco'), models.build_model(device_config.model))
  # through the Composite too; SigLIP 2 renders its views under its flag, in `late_views`
  late_views = objective.base.late_views if name == 'siglip2' else (lambda b: b)
  prepared = jax.jit(lambda b: late_views(objective.prepared(b, jax.random.key(0))))(device)
  reference = objectives.build(host_config, models.build_model(host_config.model)).prepared(host, jax.random.key(0))
  assert (device_augment.SOURCE_KEY in prepared) == (name == 'siglip2')  # SigLIP 2's stays for `late_views`
  for key in image_keys:
    assert prepared[key].shape == reference[key].shape and prepared[key].dtype == np.float32, key
    # The same crops and colours, resampled otherwise: under a level on average (normalised units: one level is
    # about 0.015); no flip, say, is ten times that.
    assert float(np.abs(prepared[key] - reference[key]).mean()) < 0.05, key


@pytest.mark.parametrize('edit, message', [
    (lambda c: c.data.__setitem__('augment_on', 'gpu'), r"config.data.augment_on='gpu'.*\['host', 'device'\]"),
    (lambda c: c.data.__setitem__('device_source_size', 0), r'config.data.device_source_size must be a positive'),
    (lambda c: c.objective.__setitem__('name', 'clip'), r"augment_on='device' does not apply to.*'clip'.*'cosmos'"),
    (lambda c: c.objective.update({'name': 'slip', 'ssl_background': 'random'}),
     r"ssl_background='random' needs config.data.augment_on='host'"),
])
def test_bad_device_augment_settings_name_the_key(micro, edit, message):
  micro.objective.name = 'cosmos'
  micro.data.augment_on = 'device'
  validate(micro)
  edit(micro)
  with pytest.raises(ConfigError, match=message):
    validate(micro)


def test_siglip2_device_views_follow_its_switch_and_naflex_stage(micro):
  """SigLIP 2 in device mode, with the late losses from step 4 and the NaFlex stage from step 6 of 8: an example
  drawn before the switch or in the NaFlex stage is what host mode makes of it (no view, the same draws), one between
  them carries the source and parameters in place of the views (all else as in host mode); `fill_batch` gives a
  batch before the switch the signature of one after it; the step leaves its views to `late_views` (under the flag:
  not rendered before the switch) and a NaFlex batch alone."""
  micro.model.vision.type = 'siglip_vit'
  micro.data.synthetic.regions = True
  micro.data.naflex.sequence_lengths = (4, 9)
  micro.total_steps = 8
  micro.objective.update(distill_start_fraction=0.5, naflex_start_fraction=0.75, decoder_weight=1.0,
                         decoder_box_bins=8, decoder_length=8)
  host_config = _config(micro, 'siglip2', 'host')
  device_config = _config(micro.copy_and_resolve_references(), 'siglip2', 'device')
  validate(device_config)
  host_views, device_views = (objectives.OBJECTIVES.get('siglip2').views(c) for c in (host_config, device_config))
  decode = DecodeRecord()
  batches = {}
  for step in (3, 4, 6):
    examples = []
    for i in range(2):
      example = {**decode.map(records.serialize(synthetic.make_example(0, 'train', 'studio', i, 24, regions=True))),
                 pipeline.STEP_KEY: step}
      host = host_views.random_map(example, np.random.default_rng([step, i]))
      device = device_views.random_map(example, np.random.default_rng([step, i]))
      made = ({device_augment.SOURCE_KEY, 'global_view_params', 'local_views_params'} if step == 4 else set())
      assert set(device) - set(host) == made and set(host) - set(device) == (made and {'global_view', 'local_views'})
      shared = set(host) & set(device)
      chex.assert_trees_all_equal({k: device[k] for k in shared}, {k: host[k] for k in shared})
      examples.append(device)
    batches[step] = device_views.fill_batch({k: np.stack([e[k] for e in examples]) for k in examples[0]})
  chex.assert_trees_all_equal_shapes_and_dtypes(batches[3], batches[4])
  assert not batches[3][device_augment.SOURCE_KEY].any()
  objective = objectives.build(device_config, models.build_model(device_config.model))
  prepared = objective.prepared(batches[3], jax.random.key(0))
  assert not {'global_view', 'local_views'} & set(prepared)  # not rendered outside `_distill_features`' cond
  before = jax.jit(objective.late_views)(prepared)
  assert before['global_view'].shape == (2, 16, 16, 3) and before['local_views'].shape == (2, 2, 8, 8, 3)
  assert all(np.isfinite(before[k]).all() for k in ('global_view', 'local_views'))
  naflex = objective.prepared(batches[6], jax.random.key(0))
  assert not {'global_view', 'local_views', device_augment.SOURCE_KEY} & set(naflex)
