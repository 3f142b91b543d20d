"""Config validation: bad keys, types and choices give errors that name the key and the valid choices."""
import os

import ml_collections
from support import ROOT
import pytest

from vlp_jax.config import ConfigError, advisories, base_config, from_file, validate, with_term
from vlp_jax.errors import MissingInputError



def test_base_and_shipped_configs_are_valid():
  validate(base_config(), num_devices=8)
  for name in sorted(os.listdir(os.path.join(ROOT, 'configs'))):
    if name.endswith('.py') and not name.startswith('_'):
      config = from_file(os.path.join(ROOT, 'configs', name))
      if config.init.require_checkpoint:  # e.g. continue pre-training: says what is missing, then validates
        with pytest.raises(ConfigError, match='config.init.checkpoint is required'):
          validate(config)
        config.init.checkpoint = '/some/imported/checkpoint'
      if 'saco' in config.objective.terms and config.objective.saco.beta > 0 and not config.data.teacher_embeddings:
        with pytest.raises(ConfigError, match='teacher embeddings'):
          validate(config)
        config.data.teacher_embeddings = '/some/teacher.npz'
      validate(config)


@pytest.mark.parametrize('mutate,message', [
    (lambda c: c.optim.__setitem__('learnig_rate', 1e-3), r"unknown config key 'config.optim.learnig_rate'.*'lr'"),
    (lambda c: c.__setitem__('totl_steps', 3), r"unknown config key 'config.totl_steps'"),
    (lambda c: c.model.vision.__setitem__('patch', 8), r"config.model.vision.patch'.*patch_size"),
    (lambda c: c.__setitem__('batch_size', 0), r'config.batch_size must be a positive integer'),
    (lambda c: c.data.__setitem__('probe_train_examples', -1), r'config.data.probe_train_examples must be 0 \(all\)'),
    (lambda c: c.objective.__setitem__('name', 'clipp'), r"'clipp', which is not a registered objective.*clip"),
    (lambda c: c.model.__setitem__('act', 'relu'), r"config.model.act='relu'.*quick_gelu"),
    (lambda c: c.data.__setitem__('name', 'laion'), r"config.data.name='laion'.*array_record"),
    (lambda c: c.eval.__setitem__('tasks', ('zeroshot', 'vqa')), r"config.eval.tasks has 'vqa'.*retrieval"),
    (lambda c: c.model.vision.__setitem__('patch_size', 5), r'image_size=32 is not a multiple.*patch_size=5'),
    (lambda c: c.model.text.__setitem__('heads', 3), r'config.model.text.width=128 is not divisible'),
    (lambda c: c.optim.__setitem__('warmup_steps', -1), r'config.optim.warmup_steps'),
    (lambda c: c.data.synthetic.__setitem__('sources', ('studio', 'cartoon')), r"'cartoon'.*sketch"),
    (lambda c: c.data.synthetic.__setitem__('captions', 'verbose'), r"captions='verbose'.*detailed"),
    (lambda c: c.data.__setitem__('mixing', 'weighted'), r"mixing='weighted' needs config.data.source_weights"),
    (lambda c: c.data.__setitem__('source_weights', 'web=1'), r"source_weights is set but.*mixing='mixed'"),
    (lambda c: c.data.__setitem__('augment', 'mixup'), r"config.data.augment='mixup'.*randaugment"),
    (lambda c: c.data.__setitem__('crop_scale', (0.5,)), r'config.data.crop_scale=\(0.5,\) must be'),
    (lambda c: (c.objective.__setitem__('name', 'slip'), c.data.__setitem__('augment', 'autoaugment')),
     r"do not apply to config.objective.name='slip'"),
    (lambda c: c.data.__setitem__('max_bad_fraction', 1.5), r'config.data.max_bad_fraction=1.5 must be in \[0, 1\]'),
    (lambda c: c.model.text.__setitem__('pool', 'mean'), r"config.model.text.pool='mean'.*'last'"),
    (lambda c: (c.data.__setitem__('resampled', True), c.data.__setitem__('mixing', 'sequential')),
     r"config.data.resampled=True draws shards for config.data.mixing='mixed' batches, not 'sequential'"),
    (lambda c: (c.data.__setitem__('shards_by_process', True), c.data.__setitem__('mixing', 'single_source')),
     r"config.data.shards_by_process=True makes 'mixed' batches.*config.data.mixing='single_source'"),
    (lambda c: c.model.text.__setitem__('tokenizer', 'spm'), r"config.model.text.tokenizer='spm'.*sentencepiece"),
    (lambda c: c.model.text.__setitem__('tokenizer', 'sentencepiece'), r'needs config.model.text.tokenizer_path'),
    (lambda c: (c.model.vision.__setitem__('type', 'siglip_vit'), c.model.__setitem__('embed_dim', 64)),
     r"config.model.embed_dim=64 must equal config.model.vision.width=128.*'siglip_vit' tower has no projection"),
])
def test_invalid_configs_name_the_key(mutate, message):
  config = base_config()
  mutate(config)
  with pytest.raises(ConfigError, match=message):
    validate(config)


def test_type_mismatch_names_the_key():
  config = base_config()
  config.optim = ml_collections.ConfigDict({**config.optim.to_dict(), 'lr': 'fast'})  # as a config file might
  with pytest.raises(ConfigError, match=r'config.optim.lr has type str, expected float'):
    validate(config)


def test_batch_must_split_over_devices():
  config = base_config()
  config.batch_size = 12
  with pytest.raises(ConfigError, match='divisible by the device count 8'):
    validate(config, num_devices=8)


def test_advisories_warn_of_scan_without_remat_only():
  config = base_config()
  assert advisories(config) == []
  config.model.scan_layers = True
  (line,) = advisories(config)
  assert 'config.model.scan_layers=True without config.model.remat' in line
  config.model.remat = True
  assert advisories(config) == []


def test_a_smoke_run_shorter_than_the_warmup_is_valid_and_says_where_the_lr_ends():
  config = base_config()
  config.total_steps, config.optim.warmup_steps, config.optim.lr = 5, 20, 1e-3
  validate(config)  # refused before: a 5-step smoke run of a config with 20 warmup steps
  (line,) = advisories(config)
  assert 'config.optim.warmup_steps=20 is more than config.total_steps=5' in line
  assert 'ends at 0.00025' in line  # 5 of 20 linear warmup steps from 0 to 1e-3
  config.optim.warmup_steps = 5
  assert advisories(config) == []


def test_a_data_path_that_the_format_would_ignore_is_refused_with_the_format_to_use(tmp_path):
  config = base_config()  # data.name 'synthetic': the embedded dataset, which reads no path
  config.data.path = str(tmp_path)
  with pytest.raises(ConfigError, match=r"config.data.path='.*' is set, but config.data.name='synthetic' reads no "
                                        r"path.*NAME one of \['array_record', 'webdataset'\]"):
    validate(config)
  (tmp_path / 'shard-00000.tar').write_bytes(b'')
  with pytest.raises(ConfigError, match=r"look like 'webdataset' shards: add --config.data.name=webdataset"):
    validate(config)
  config.data.name = 'webdataset'
  validate(config)


def test_every_missing_input_is_listed_together_after_the_other_checks():
  config = from_file(os.path.join(ROOT, 'configs', 'clip_continue.py'))
  config = with_term(config, 'saco', beta=1.0)  # needs teacher embeddings; clip_continue needs a checkpoint
  with pytest.raises(MissingInputError) as caught:
    validate(config)
  assert 'needs teacher embeddings' in str(caught.value)
  assert 'config.init.checkpoint is required' in str(caught.value)
  config.batch_size = 0  # any other problem is reported first, alone
  with pytest.raises(ConfigError, match='config.batch_size must be a positive integer') as caught:
    validate(config)
  assert not isinstance(caught.value, MissingInputError)
