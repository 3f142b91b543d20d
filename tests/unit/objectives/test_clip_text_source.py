"""CLIP's `objective.text_source` (objectives/text_source.py): 'caption' (the default: the record's caption, batches
as before the option) or 'text_crops' (one text crop drawn as COSMOS draws its first global text crop, from the same
pool with the same sampler), its validation, and which objectives take it."""
import glob
import os
import pickle

import numpy as np
import pytest
from support import ROOT

from vlp_jax import objectives
from vlp_jax.config import ConfigError, from_file, validate
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.image.image_ops import resize_image
from vlp_jax.data.loading.pipeline import DecodeRecord
from vlp_jax.data.text.text_crops import FirstGlobalCrop
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.objectives import cosmos
from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, preprocessing_of
from vlp_jax.objectives.text_source import TextSourceViews
from vlp_jax.objectives.views import ClipViews


def _examples(size=8):
  """Decoded embedded-dataset records: an image, a short caption and a long (multi-sentence) one."""
  decode = DecodeRecord()
  return [decode.map(records.serialize(synthetic.make_example(0, 'train', 'studio', i, 16))) for i in range(size)]


def _shipped_clip_configs():
  paths = sorted(glob.glob(os.path.join(ROOT, 'configs', '*.py')) +
                 glob.glob(os.path.join(ROOT, 'configs', 'experiments', '*.py')))
  configs = {os.path.relpath(p, ROOT): from_file(p) for p in paths if not os.path.basename(p).startswith('_')}
  return {name: c for name, c in configs.items() if c.objective.name in ('clip', 'siglip')}


def test_default_is_the_caption_and_shipped_configs_build_the_views_they_built_before():
  configs = _shipped_clip_configs()
  assert 'configs/clip_shapes.py' in configs and 'configs/siglip_shapes.py' in configs
  for name, config in configs.items():
    cls = objectives.OBJECTIVES.get(config.objective.name)
    if cls.options(config.objective).text_source != 'caption':
      assert os.path.basename(name).startswith('clip_text_pool'), name
      continue  # the controls of COSMOS read its text pool on purpose
    # the old construction, with the model family's preprocessing (issue 61: SigLIP presets resize to a square,
    # configs continuing imported OpenAI weights take torchvision's crop); every other one keeps OpenAI's
    preprocessing = preprocessing_of(config.model)
    before = ClipViews(config.model.vision.image_size, config.model.text.context_length, config.data.caption_field,
                       crop_scale=tuple(config.data.crop_scale), augment=config.data.augment,
                       preprocessing=preprocessing)
    assert cls.views(config) == before, name
    if not name.endswith('_continue.py'):
      assert preprocessing == OPENAI_CLIP_PREPROCESSING, name


def test_caption_text_is_the_tokenised_caption_and_draws_nothing(micro):
  views = objectives.OBJECTIVES.get('clip').views(micro)
  tokenize = default_tokenizer()
  for example in _examples():
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    out = views.random_map(dict(example), rng)
    np.testing.assert_array_equal(out['text'], tokenize(example['caption'], context_length=16)[0])
    np.testing.assert_array_equal(out['image'], resize_image(example['image'], 16))
    assert rng.bit_generator.state == state  # no draw: the pipeline's later draws are unchanged too


@pytest.mark.parametrize('include_caption,max_sentences', [(False, 5), (True, 5), (True, 2)])
def test_text_crops_text_is_what_cosmos_draws_for_its_first_global_crop(micro, monkeypatch, include_caption,
                                                                         max_sentences):
  """For the same example and generator state, CLIP's text is COSMOS's first global text crop: COSMOS's views are
  run with a spy that records the state its text sampler starts from, and CLIP's views are given that state."""
  cosmos_config, clip_config = micro.copy_and_resolve_references(), micro
  cosmos_config.objective.update(name='cosmos', num_local_crops=1, local_crop_size=8)
  clip_config.objective.text_source = 'text_crops'
  for config in (cosmos_config, clip_config):
    config.objective.caption_in_text_crops = include_caption
    config.objective.text_crop_max_sentences = max_sentences
    validate(config)
  states, sampler = [], cosmos.text_crops

  def spy(long_caption, caption, rng, *args, **kwargs):
    states.append(rng.bit_generator.state)
    return sampler(long_caption, caption, rng, *args, **kwargs)

  monkeypatch.setattr(cosmos, 'text_crops', spy)
  cosmos_views = objectives.OBJECTIVES.get('cosmos').views(cosmos_config)
  clip_views = objectives.OBJECTIVES.get('clip').views(clip_config)
  tokenize = default_tokenizer()
  from_long_caption = 0
  for seed in range(6):
    for example in _examples():
      want = cosmos_views.random_map(dict(example), np.random.default_rng(seed))['texts'][0]
      rng = np.random.default_rng()
      rng.bit_generator.state = states[-1]
      got = clip_views.random_map(dict(example), rng)['text']
      np.testing.assert_array_equal(got, want)
      from_long_caption += not np.array_equal(got, tokenize(example['caption'], context_length=16)[0])
  assert from_long_caption > 24  # mostly not the caption: crops of the long caption


def test_text_source_is_validated_and_only_offered_where_the_views_read_it(micro):
  micro.objective.text_source = 'long_caption'
  with pytest.raises(ConfigError, match=r"config.objective.text_source='long_caption' is not valid; valid choices: "
                                        r"\['caption', 'text_crops'\]"):
    validate(micro)
  micro.objective.text_source = 'text_crops'
  micro.objective.text_crop_max_sentences = 0
  with pytest.raises(ConfigError, match='config.objective.text_crop_max_sentences must be a positive integer'):
    validate(micro)
  micro.objective.text_crop_max_sentences = 3
  validate(micro)
  views = objectives.OBJECTIVES.get('clip').views(micro)
  assert views.text_crop == FirstGlobalCrop(include_caption=False, max_sentences=3)
  assert pickle.loads(pickle.dumps(views)) == views  # grain's worker processes get it pickled
  micro.objective.name = 'siglip'  # SigLIP takes CLIP's views, so the option too
  validate(micro)
  assert objectives.OBJECTIVES.get('siglip').views(micro).text_crop is not None
  micro.objective.name = 'slip'  # SLIP has views of its own, which would ignore it: an unknown key there
  with pytest.raises(ConfigError, match=r"unknown config key 'config.objective.(text_source|text_crop_max|caption_in)"):
    validate(micro)


def test_only_the_objectives_on_clips_views_take_the_text_source():
  """'clip' and 'siglip' take CLIP's views and so the option; every objective with views of its own (SLIP, SigLIP 2,
  COSMOS, ZeroVL) leaves it out, though SLIP and SigLIP 2 build on CLIP's and SigLIP's features and losses."""
  takes = {name for name, cls in objectives.OBJECTIVES.items() if issubclass(cls, TextSourceViews)}
  assert takes == {'clip', 'siglip'}
  for name, cls in objectives.OBJECTIVES.items():
    assert ('text_source' in cls.default_config()) == (name in takes), name
  assert {'slip', 'siglip2'} <= set(objectives.OBJECTIVES.names())
