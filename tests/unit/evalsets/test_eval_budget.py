"""The full-scale configs evaluate what their papers report, with a capped linear probe, and what that costs a host
(evalsets/budget.py) against the eval sets as the loaders build them."""
import os

import numpy as np
import pytest

from support import ROOT
from vlp_jax import evalsets
from vlp_jax.config import base_config, from_file, validate
from vlp_jax.evalsets import budget

FULL_SCALE = ('clip_cc3m', 'saco_cc3m', 'cosmos_cc3m', 'slip_cc3m', 'zerovl_multisource', 'siglip2_webli',
              'clip_continue', 'saco_continue')
# Each paper's evaluations (the config docstrings): ImageNet zero-shot, COCO and Flickr30k retrieval, and the
# linear probe where the paper reports one (SaCo's and SLIP's).
WITH_PROBE = {'clip_cc3m', 'saco_cc3m', 'slip_cc3m'}
# The probe's train images per process, at most: below the size above which an eval split is streamed (decoded
# again at every evaluation) rather than held.
PROBE_BOUND_BYTES = 8 * 2**30
GIB = 2**30


def _config(name):
  return from_file(os.path.join(ROOT, 'configs', f'{name}.py'))


@pytest.mark.parametrize('name', FULL_SCALE)
def test_each_full_scale_config_evaluates_its_papers_sets_with_a_capped_probe(name):
  config = _config(name)
  assert tuple(config.eval.datasets) == ('imagenet2012', 'coco_captions', 'flickr30k')
  assert {'zeroshot', 'retrieval'} <= set(config.eval.tasks)
  assert ('linear_probe' in config.eval.tasks) == (name in WITH_PROBE)
  # a naive estimate: every probe image the loader would hold as [S, S, 3] float32
  size = config.model.vision.image_size
  cap = config.data.probe_train_examples
  probe_images = min(cap or 1_281_167, 1_281_167) if 'linear_probe' in config.eval.tasks else 0  # ImageNet's train
  naive = probe_images * size * size * 3 * 4
  assert budget.probe_host_bytes(config) == naive < PROBE_BOUND_BYTES
  # no set is unknown to the estimate, and what a process holds between evaluations stays bounded too
  costs = budget.eval_costs(config)
  assert all(cost.held_bytes is not None for cost in costs)
  assert sum(cost.held_bytes for cost in costs) < 12 * GIB


def test_the_probe_is_capped_by_default_and_0_still_means_the_whole_split():
  config = base_config()
  assert 0 < config.data.probe_train_examples <= 10_000
  config.model.vision.image_size = 256
  config.eval.datasets = ('imagenet2012',)
  assert budget.probe_host_bytes(config) == 10_000 * 256 * 256 * 12  # 7.3 GiB
  config.data.probe_train_examples = 0
  assert budget.probe_host_bytes(config) == 1_281_167 * 256 * 256 * 12  # what 143c8f2 would read each evaluation
  assert budget.set_cost('imagenet2012', config).decoded_per_eval == 50_000 + 1_281_167  # both streamed


def test_the_estimate_matches_the_embedded_set_as_loaded(micro):
  """held_bytes of the embedded set: its test images and probe images as evalsets load them, byte for byte."""
  micro.eval.datasets = ('synthetic',)
  micro.eval.tasks = ('zeroshot', 'linear_probe')
  for cap in (30, 0):
    micro.data.probe_train_examples = cap
    validate(micro)
    loaded = evalsets.load_eval_sets(micro)[0]
    cost = budget.set_cost('synthetic', micro)
    assert cost.held_bytes == loaded.images.nbytes + loaded.train_images.nbytes
    assert (cost.images, cost.probe_images) == (len(loaded.images), len(loaded.train_images))
    assert cost.texts == len(loaded.captions) + len(loaded.class_names) * len(loaded.templates)
  micro.eval.tasks = ('zeroshot',)  # no probe: no train images
  assert budget.set_cost('synthetic', micro).probe_images == 0 and \
      evalsets.load_eval_sets(micro)[0].train_images is None


def test_held_and_streamed_follow_the_loaders_rule():
  config = base_config()
  config.eval.tasks = ('zeroshot', 'retrieval')
  config.model.vision.image_size = 224
  imagenet, coco, flickr = (budget.set_cost(n, config) for n in ('imagenet2012', 'coco_captions', 'flickr30k'))
  assert (imagenet.held_bytes, imagenet.decoded_per_eval) == (0, 50_000)  # 28 GiB: streamed
  assert (coco.held_bytes, coco.decoded_per_eval) == (5_000 * 224 * 224 * 12, 0)
  assert (flickr.held_bytes, flickr.decoded_per_eval) == (0, 1_000)  # flickr30k.py always streams
  assert (imagenet.texts, coco.texts, flickr.texts) == (1000 * 80, 25_000, 5_000)
  assert budget.set_cost('digits', config).held_bytes is None  # no published size here: unknown, not guessed
  assert np.isclose(budget.held_bytes(50_000, 224) / GIB, 28.03, atol=0.01)  # streamed.py's 28 GiB
