"""config.data.augment_on='device' for COSMOS and SLIP: the host's views leave the crops to the step, with the same
draws (so the text and everything drawn after the images are unchanged), `Objective.prepared` renders them (also
under a term), and the config refuses what it cannot do."""
import jax
import numpy as np
import pytest

from vlp_jax import models, objectives
from vlp_jax.config import ConfigError, validate, with_term
from vlp_jax.data import device_augment, records, synthetic
from vlp_jax.data.pipeline import DecodeRecord

# objective -> (its options for a small run, the image views it makes)
METHODS = {'cosmos': ({'num_local_crops': 2, 'num_local_texts': 2, 'local_crop_size': 8,
                       'local_text_context_length': 8, 'cross_attention_heads': 4}, ('global_images', 'local_images')),
           'slip': ({'head_mlp_dim': 16, 'head_out_dim': 8}, ('image', 'ssl_a', 'ssl_b'))}


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
  prepared = jax.jit(lambda b: objective.prepared(b, jax.random.key(0)))(device)  # through the Composite too
  reference = objectives.build(host_config, models.build_model(host_config.model)).prepared(host, jax.random.key(0))
  assert device_augment.SOURCE_KEY not in prepared
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
