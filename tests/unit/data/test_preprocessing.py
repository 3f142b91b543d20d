"""Preprocessing as a property of the model family (issue 61, item 8): presets set it, checkpoints saved before it
existed keep OpenAI CLIP's, config validation names a bad field, and training (the train step's normalisation, the
views' resize), evaluation and the loaded model all use the model's, compared here with a direct computation of
SigLIP's square resize to [-1, 1]. The end-to-end parity with each library's own processor is
tests/parity/test_preprocessing_parity.py."""
import jax
import numpy as np
from PIL import Image
import pytest

from vlp_jax import evalsets, models, objectives
from vlp_jax.config import base_config, validate, with_current_defaults
from vlp_jax.data.image import image_ops
from vlp_jax.errors import ConfigError
from vlp_jax.evalsets import digits


def _siglip_squash(image, size):
  """SigLIP's input, computed directly: PIL's bicubic resize of both sides, then x / 127.5 - 1."""
  resized = np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BICUBIC), np.float64)
  return resized / 127.5 - 1.0


def _siglip_config():
  """The tiny model with SigLIP's preprocessing (as an imported SigLIP checkpoint's config has it)."""
  config = base_config()
  config.model.preprocess = image_ops.SIGLIP_PREPROCESSING.config()
  return config


def test_presets_carry_their_familys_preprocessing():
  assert image_ops.preprocessing_of(models.preset('ViT-B-16')) == image_ops.OPENAI_CLIP_PREPROCESSING
  for name in ('ViT-B-16-SigLIP', 'ViT-SO400M-14-SigLIP-384'):
    assert image_ops.preprocessing_of(models.preset(name)) == image_ops.SIGLIP_PREPROCESSING
  assert image_ops.preprocessing_of(base_config().model) == image_ops.OPENAI_CLIP_PREPROCESSING  # small runs


def test_a_checkpoint_saved_without_the_field_keeps_openai_clips():
  saved = base_config().to_dict()
  saved['model'] = models.preset('ViT-B-16-SigLIP').to_dict()
  del saved['model']['preprocess']  # as every checkpoint written before 2c110d8
  assert image_ops.preprocessing_of(with_current_defaults(saved).model) == image_ops.OPENAI_CLIP_PREPROCESSING


def test_config_validation_names_a_bad_preprocessing_field():
  config = base_config()
  config.model.preprocess.resize = 'stretch'
  with pytest.raises(ConfigError, match=r"config.model.preprocess.resize='stretch' is not valid; valid choices: "
                                        r"\['shorter_side_crop', 'squash'\]"):
    validate(config)


def test_training_normalises_and_resizes_as_the_model_family():
  config = _siglip_config()
  objective = objectives.build(config, models.build_model(config.model))
  image = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
  prepared = objective.prepared({'image': image}, jax.random.key(0))
  np.testing.assert_allclose(np.asarray(prepared['image']), image / 127.5 - 1.0, atol=1e-6)
  views = type(objective).views(config)
  wide = np.random.default_rng(1).integers(0, 256, (20, 50, 3), dtype=np.uint8)
  out = views.random_map({'image': wide, 'caption': 'a cat', 'label': 0}, np.random.default_rng(0))
  np.testing.assert_array_equal(out['image'], np.asarray(Image.fromarray(wide).resize((32, 32),
                                                                                       Image.Resampling.BICUBIC)))


def test_evaluation_preprocesses_as_the_model_family():
  config = _siglip_config()
  config.eval.datasets = ('digits',)
  (eval_set,) = evalsets.load_eval_sets(config)
  raw, labels = digits.render_digits()
  first = raw[np.sort(digits.split_indices(labels)[config.eval.split])[0]]
  np.testing.assert_allclose(eval_set.images[0], _siglip_squash(first, 32), atol=1e-5)
