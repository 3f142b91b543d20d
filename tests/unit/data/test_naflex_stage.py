"""SigLIP 2's NaFlex stage on the host (data/image/naflex_stage.py, objectives/siglip2.Siglip2Views): the per-step patch
budget (deterministic, uniform over the declared set, a function of the step alone, so resume-safe), the examples'
NaFlex patches against data/image/naflex_patches.py's `naflex_patches` of the decoded image, the pipeline's batches
across the switch and a resumed iterator, and the config checks."""
import os

import chex
import numpy as np
import pytest
from scipy import stats

from support import ROOT
from vlp_jax import objectives
from vlp_jax.config import ConfigError, from_file, validate
from vlp_jax.data import formats
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.image.image_ops import preprocessing_of
from vlp_jax.data.image.naflex_patches import naflex_patches
from vlp_jax.data.image.naflex_stage import PATCHES, SPATIAL_SHAPES, batch_sequence_length
from vlp_jax.data.loading.pipeline import DecodeRecord
from vlp_jax.objectives.siglip2 import normalized_naflex_patches

LENGTHS = (4, 9, 16)


def _naflex(config, **options):
  """`config` (the micro one) with SigLIP's tower and SigLIP 2's objective: the decoder on, the late losses from
  step 4 and the NaFlex stage from step 6 of 8."""
  config.model.vision.type = 'siglip_vit'
  config.objective.name = 'siglip2'
  config.data.synthetic.regions = True
  config.objective.update(num_local_crops=2, local_crop_size=8, head_hidden_dim=16, head_bottleneck_dim=8,
                          head_prototypes=12, decoder_weight=1.0, decoder_box_bins=8, decoder_length=8,
                          distill_start_fraction=0.5, naflex_start_fraction=0.75, **options)
  config.data.naflex.sequence_lengths = LENGTHS
  config.total_steps = 8
  config.batch_size = 4
  return config


def test_the_budget_is_a_function_of_seed_and_step_alone():
  draws = [batch_sequence_length(0, step, LENGTHS) for step in range(200)]
  assert draws == [batch_sequence_length(0, step, LENGTHS) for step in range(200)]  # again: the same
  assert set(draws) == set(LENGTHS)
  assert draws != [batch_sequence_length(1, step, LENGTHS) for step in range(200)]  # another seed, another draw
  assert batch_sequence_length(0, 7, (5,)) == 5


def test_the_budget_is_uniform_over_the_set():
  lengths = (128, 256, 576, 784, 1024)
  draws = np.array([batch_sequence_length(3, step, lengths) for step in range(5000)])
  counts = [int(np.sum(draws == n)) for n in lengths]
  assert stats.chisquare(counts).pvalue > 1e-3, counts
  # consecutive steps are not tied to each other: a uniform pair of draws agrees 1 time in 5
  agree = np.mean(draws[1:] == draws[:-1])
  assert abs(agree - 0.2) < 0.03, agree


def test_examples_from_the_switch_are_naflex_patches_of_the_decoded_image(micro):
  config = _naflex(micro)
  validate(config)
  views = objectives.OBJECTIVES.get('siglip2').views(config)
  assert (views.views_from_step, views.naflex_from_step) == (4, 6)
  preprocessing = preprocessing_of(config.model)
  decode = DecodeRecord()
  for i in range(3):
    example = decode.map(records.serialize(synthetic.make_example(0, 'train', 'studio', i, 24 + 8 * i, regions=True)))
    before = views.random_map({**example, pipeline.STEP_KEY: 5}, np.random.default_rng([0, i]))
    for step in (6, 7):
      at = views.random_map({**example, pipeline.STEP_KEY: step}, np.random.default_rng([0, i]))
      budget = batch_sequence_length(config.seed, step, LENGTHS)
      want_patches, want_shape = naflex_patches(example['image'], 4, budget, preprocessing)
      # uint8 on the host, normalised in the train step: then naflex_patches of the decoded image
      assert at[PATCHES].shape == (budget, 4 * 4 * 3) and at[PATCHES].dtype == np.uint8
      normalized = normalized_naflex_patches(at[PATCHES][None], at[SPATIAL_SHAPES][None], preprocessing)[0]
      np.testing.assert_allclose(np.asarray(normalized), want_patches, rtol=1e-6, atol=1e-6)
      np.testing.assert_array_equal(at[SPATIAL_SHAPES], want_shape)
      # no square image and no augmented view; the caption and the decoder's rows are drawn as before
      assert set(before) - set(at) == {'image', 'global_view', 'local_views'}
      assert set(at) - set(before) == {PATCHES, SPATIAL_SHAPES}
      chex.assert_trees_all_equal({k: at[k] for k in ('text', 'label', 'locca_parallel')},
                                  {k: before[k] for k in ('text', 'label', 'locca_parallel')})


def test_pipeline_batches_take_their_step_budget_and_resume_across_the_switch(micro):
  config = _naflex(micro)
  views = objectives.OBJECTIVES.get('siglip2').views(config)

  def iterator():
    return pipeline.train_iterator(formats.train_paths(config.data), views, pipeline.PipelineSettings(seed=3,
                                   global_batch_size=4, process_index=0, process_count=1))
  it = iterator()
  batches = [pipeline.pop_status(next(it))[0] for _ in range(9)]
  for step, batch in enumerate(batches):
    if step < 6:
      assert 'image' in batch and PATCHES not in batch
      continue
    budget = batch_sequence_length(config.seed, step, LENGTHS)
    assert batch[PATCHES].shape == (4, budget, 48) and batch[SPATIAL_SHAPES].shape == (4, 2)
    assert 'image' not in batch and 'global_view' not in batch  # fill_batch leaves a NaFlex batch as it is
    real = np.prod(batch[SPATIAL_SHAPES], axis=1)
    assert np.all(real <= budget)
    for row, count in zip(batch[PATCHES], real):
      assert not row[count:].any()  # zero rows past the image's patches
  resumed = iterator()
  for _ in range(5):
    next(resumed)
  again = iterator()
  again.set_state(resumed.get_state())
  for want in batches[5:]:
    chex.assert_trees_all_equal(pipeline.pop_status(next(again))[0], want)


@pytest.mark.parametrize('key, value, named', [
    ('objective.naflex_start_fraction', 1.5, 'config.objective.naflex_start_fraction'),
    ('data.naflex.sequence_lengths', (), 'config.data.naflex.sequence_lengths'),
    ('data.naflex.sequence_lengths', (16, 16), 'config.data.naflex.sequence_lengths'),
    ('data.naflex.sequence_lengths', (0, 16), 'config.data.naflex.sequence_lengths'),
    ('eval.naflex_max_patches', (16, -1), 'config.eval.naflex_max_patches'),
    ('model.vision.patch_dropout', 0.5, 'config.model.vision.patch_dropout'),
    ('data.crop_scale', (0.9, 1.0), 'config.data.crop_scale'),
    ('model.vision.type', 'vit', "config.model.vision.type in ['siglip_vit']")])
def test_bad_naflex_settings_are_refused_by_name(micro, key, value, named):
  config = _naflex(micro)
  config.eval.naflex_max_patches = (4, 16)
  validate(config)
  parent, name = key.rsplit('.', 1)
  node = config
  for part in parent.split('.'):
    node = node[part]
  node[name] = value
  if key == 'model.vision.type':  # the ViT has a class token and a projection: embed_dim then may differ
    config.eval.naflex_max_patches = ()
  with pytest.raises(ConfigError, match=named.replace('[', r'\[').replace(']', r'\]').replace('.', r'\.')):
    validate(config)


def test_the_siglip2_configs_offer_the_naflex_stage_as_a_variant():
  for name, budgets in (('siglip2_shapes.py', (16, 64)), ('siglip2_webli.py', (256, 576, 1024))):
    path = os.path.join(ROOT, 'configs', name)
    plain, naflex = from_file(path), from_file(path, 'naflex')
    for config in (plain, naflex):
      config.model.text.tokenizer_path = config.model.text.tokenizer_path or 'gemma.model'  # webli's: the user's
      validate(config)
    options = objectives.OBJECTIVES.get('siglip2').options
    assert options(plain.objective).naflex_start_fraction == 1.0 and plain.eval.naflex_max_patches == ()
    assert options(naflex.objective).naflex_start_fraction == 0.9 and naflex.model.vision.type == 'siglip_vit'
    assert tuple(naflex.eval.naflex_max_patches) == budgets
    grid = (naflex.model.vision.image_size // naflex.model.vision.patch_size) ** 2
    assert naflex.model.vision.naflex and naflex.model.vision.max_patches == grid  # encode_image's default budget
    with pytest.raises(ConfigError, match="valid choices: \\['naflex'\\]"):
      from_file(path, 'navit')
  shapes = from_file(os.path.join(ROOT, 'configs', 'siglip2_shapes.py'), 'naflex')
  # the paper's lengths over its 256 patches, scaled to the tiny model's 16
  grid = (shapes.model.vision.image_size // shapes.model.vision.patch_size) ** 2
  assert [round(n * 256 / grid) for n in shapes.data.naflex.sequence_lengths] == [128, 256, 576, 784, 1024]
