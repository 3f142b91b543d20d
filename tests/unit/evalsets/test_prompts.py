"""Zero-shot prompt templates by name and per dataset, ImageNet's prompt class names and mean-per-class accuracy."""
import numpy as np
import pytest

from vlp_jax.config import ConfigError, base_config, validate
from vlp_jax import evalsets
from vlp_jax.data.sources import class_names
from vlp_jax.evalsets import digits
from vlp_jax.evalsets import prompts as templates
from vlp_jax.evalsets import tfds as tfds_sets
from vlp_jax.evaluation import with_templates
from vlp_jax.evaluation.zeroshot import mean_per_class_accuracy, zeroshot_metrics


def test_openai_imagenet_templates_are_80_distinct_with_one_slot():
  assert len(templates.OPENAI_IMAGENET_TEMPLATES) == 80 == len(set(templates.OPENAI_IMAGENET_TEMPLATES))
  assert len(templates.CIFAR_TEMPLATES) == 18 == len(set(templates.CIFAR_TEMPLATES))
  for name, prompt_set in templates.TEMPLATE_SETS.items():
    assert prompt_set and all(t.count('{}') == 1 and '{' not in t.replace('{}', '') for t in prompt_set), name
  assert 'a photo of a {}.' in templates.OPENAI_IMAGENET_TEMPLATES
  assert templates.SIMPLE_TEMPLATES == ('a photo of a {}.',)


def test_imagenet_class_names_are_clips_1000_in_the_standard_order():
  names = class_names.IMAGENET_CLASS_NAMES
  assert len(names) == 1000 and all(isinstance(n, str) and n.strip() == n and n for n in names)
  assert (names[0], names[1], names[999]) == ('tench', 'goldfish', 'toilet paper')
  assert len(set(names)) == 998  # OpenAI's list repeats 'missile' and 'sunglasses'


@pytest.mark.parametrize('dataset,expected', [
    ('imagenet2012', templates.OPENAI_IMAGENET_TEMPLATES), ('cifar10', templates.CIFAR_TEMPLATES),
    ('cifar100', templates.CIFAR_TEMPLATES), ('oxford_iiit_pet', templates.PETS_TEMPLATES),
])
def test_each_tfds_class_set_has_its_own_prompts(dataset, expected):
  assert tfds_sets.TEMPLATES[dataset] == expected


def test_the_chosen_templates_replace_a_sets_own(micro):
  own = evalsets.load_eval_set('digits', micro.data, 'test', 8)
  assert own.templates == templates.DIGITS_TEMPLATES
  assert with_templates(own, 'dataset') is own
  chosen = with_templates(own, 'cifar')
  assert chosen.templates == templates.CIFAR_TEMPLATES and chosen.class_names == digits.CLASS_NAMES
  long = evalsets.load_eval_set('synthetic_long', micro.data, 'test', 8)
  assert with_templates(long, 'cifar').templates == ()  # no class names: nothing to prompt for
  with pytest.raises(ValueError, match=r"'nope'.*'openai_imagenet', 'cifar', 'simple'"):
    with_templates(own, 'nope')


def test_config_rejects_an_unknown_template_set():
  config = base_config()
  assert config.eval.templates == 'dataset'
  config.eval.templates = 'openai_imagenet'
  validate(config)
  config.eval.templates = 'openai'
  with pytest.raises(ConfigError, match=r"config.eval.templates='openai' is not valid.*'dataset'.*'openai_imagenet'"):
    validate(config)


def test_mean_per_class_accuracy_against_a_loop():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 7, 200)
  predictions = np.where(rng.random(200) < 0.6, labels, rng.integers(0, 9, 200))  # some predict absent classes
  recalls = []
  for c in sorted(set(labels.tolist())):
    rows = [i for i in range(200) if labels[i] == c]
    recalls.append(sum(predictions[i] == c for i in rows) / len(rows))
  assert mean_per_class_accuracy(predictions, labels) == pytest.approx(sum(recalls) / len(recalls))


def test_mean_per_class_accuracy_weighs_classes_equally():
  # 8 examples of class 0, all right; 2 of class 5, both wrong: accuracy 0.8, per-class recalls 1 and 0
  labels = np.array([0] * 8 + [5] * 2)
  predictions = np.zeros(10, np.int64)
  assert np.mean(predictions == labels) == pytest.approx(0.8)
  assert mean_per_class_accuracy(predictions, labels) == pytest.approx(0.5)
  assert mean_per_class_accuracy(labels, labels) == 1.0


def test_zeroshot_metrics_report_mean_per_class():
  classes = np.eye(3)
  labels = np.array([0, 0, 0, 0, 1, 2])
  image_emb = classes[[0, 0, 0, 0, 1, 0]]  # the one class-2 image looks like class 0
  metrics = zeroshot_metrics(image_emb, classes, labels)
  assert metrics['zeroshot_top1'] == pytest.approx(5 / 6)
  assert metrics['zeroshot_mean_per_class'] == pytest.approx((1 + 1 + 0) / 3)
  assert metrics['zeroshot_chance'] == pytest.approx(1 / 3)
