"""Objectives by name and their composition: SigLIP, CLIP + SaCo (+ mimic from pre-extracted teacher embeddings
attached by the pipeline), trained by the same sharded step."""
import jax
import numpy as np
import pytest

from vlp_jax import models, objectives, parallel
from vlp_jax import interchange as weights
from vlp_jax.config import ConfigError, validate, with_term
from vlp_jax.losses import affinity_consistency as saco
from vlp_jax.losses.contrastive import clip_infonce, siglip_loss

from support import assert_trained_params_close, initial_state, run_steps


def _features_and_loss(config, batch_size=8):
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  params, state = objective.init_variables(jax.random.key(0))
  rng = np.random.default_rng(0)
  size, length = config.model.vision.image_size, config.model.text.context_length
  text = rng.integers(1, 49000, (batch_size, length)).astype(np.int32)
  text[:, 0], text[:, 4] = 49406, 49407
  batch = {'image': rng.normal(size=(batch_size, size, size, 3)).astype(np.float32), 'text': text,
           'teacher': rng.normal(size=(batch_size, 6)).astype(np.float32)}
  features, _ = objective.forward(params, state, batch, jax.random.key(1))
  return params, features, objective.loss(features, params, np.int32(10)), batch


def test_image_output_width_is_the_towers_by_shape_alone(micro):
  """The width heads and decoders are sized by (COSMOS's cross-attention, SigLIP 2's decoder, SLIP's head): read from
  the tower's output shapes, for any output."""
  micro.model.embed_dim = 24  # unlike the tower's width (32)
  objective = objectives.build(micro, models.build_model(micro.model))
  params, state = objective.init_variables(jax.random.key(0))
  assert objective.image_output_width(params, state) == micro.model.vision.width  # the patch tokens [B, N, w]
  assert objective.image_output_width(params, state, 'cls') == micro.model.vision.width
  assert objective.image_output_width(params, state, 'embed') == micro.model.embed_dim


@pytest.mark.slow
def test_clip_plus_saco_is_the_sum_of_its_terms(micro):
  with_term(micro, 'saco', alpha=2.0, ramp='linear', ramp_steps=20, masking='soft', mask_threshold=0.0)
  params, f, (loss, metrics), _ = _features_and_loss(micro)
  clip = clip_infonce(f['zi'], f['zt'], params['logit_scale'])[0]
  weights_ = saco.pair_weights(f['zi'], f['zt'], 'soft', 0.0)
  want = clip + 2.0 * 0.5 * saco.saco_loss(f['zi'], f['zt'], weights_, 'mean')  # linear ramp at step 10 of 20
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert {'clip_loss', 'saco_loss', 'saco_alpha', 'affinity_consistency', 'saco_kept_fraction'} <= set(metrics)


@pytest.mark.slow
def test_saco_ramp_over_the_whole_run_by_default(micro):
  """ramp_steps 0 follows config.total_steps, so overriding the run length keeps the ramp over the whole run."""
  micro.total_steps = 40
  with_term(micro, 'saco', alpha=2.0, ramp='linear')
  _, _, (_, metrics), _ = _features_and_loss(micro)  # at step 10 of 40
  np.testing.assert_allclose(metrics['saco_alpha'], 2.0 * 10 / 40, rtol=1e-6)
  micro.objective.saco.ramp_steps = -1
  with pytest.raises(ConfigError, match='ramp_steps'):
    validate(micro)


@pytest.mark.slow
def test_saco_with_mimic_adds_beta_times_mimic(micro):
  micro.data.teacher_embeddings = '/unused/by/this/test.npz'
  with_term(micro, 'saco', alpha=1.0, beta=3.0)
  params, f, (loss, metrics), _ = _features_and_loss(micro)
  clip = clip_infonce(f['zi'], f['zt'], params['logit_scale'])[0]
  want = (clip + saco.saco_loss(f['zi'], f['zt'], None, 'mean') +
          3.0 * saco.mimic_loss(f['zi'], f['teacher'], 'mean'))  # the term's default normalisation
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert 'mimic_loss' in metrics


@pytest.mark.slow
def test_siglip_objective_owns_a_learnable_bias(micro):
  micro.objective.name = 'siglip'
  params, f, (loss, metrics), _ = _features_and_loss(micro)
  assert float(params['logit_bias']) == -10.0
  np.testing.assert_allclose(loss, siglip_loss(f['zi'], f['zt'], params['logit_scale'], params['logit_bias'])[0])
  assert 'siglip_loss' in metrics


@pytest.mark.slow
@pytest.mark.parametrize('setup', ['siglip', 'saco'])
def test_methods_train_identically_on_eight_devices_and_one(micro, setup):
  if setup == 'siglip':
    micro.objective.name = 'siglip'
  else:
    with_term(micro, 'saco', normalization='mean', masking='hard', mask_threshold=-1.0)
  initial = initial_state(micro)  # one init (on the host) for both meshes
  want_params, want_losses, _ = run_steps(micro, parallel.make_mesh(1, jax.devices()[:1]), state=initial)
  got_params, got_losses, _ = run_steps(micro, parallel.make_mesh(2), state=initial)
  np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
  assert_trained_params_close(got_params, want_params)
  if setup == 'siglip':  # the bias is trained
    assert float(got_params['logit_bias']) != -10.0


def test_term_validation(micro):
  micro.objective.terms = ('sacco',)
  with pytest.raises(ConfigError, match="'sacco'.*saco"):
    validate(micro)
  micro.objective.terms = ()
  with_term(micro, 'saco', beta=5.0)
  with pytest.raises(ConfigError, match='teacher_embeddings'):
    validate(micro)
  micro.objective.saco.beta = 0.0
  micro.objective.saco.masking = 'soft-ish'
  with pytest.raises(ConfigError, match=r"config.objective.saco.masking='soft-ish'.*hard"):
    validate(micro)


@pytest.mark.slow
def test_mimic_with_an_on_the_fly_teacher_checkpoint(micro, tmp_path):
  """The teacher's image tower runs in the step; its mimic loss equals the one from pre-extracted embeddings."""
  model = models.build_model(micro.model)
  params, state = models.init_variables(model, jax.random.key(9))
  teacher = weights.save_checkpoint(str(tmp_path / 'teacher'), jax.tree.map(np.asarray, params), state, micro)
  with_term(micro, 'saco', alpha=1.0, beta=2.0, normalization='mean', teacher='checkpoint',
            teacher_checkpoint=teacher)
  validate(micro)
  _, f, (_, metrics), batch = _features_and_loss(micro)
  want = np.asarray(model.apply({'params': params}, batch['image'], method=model.encode_image)['embed'])
  np.testing.assert_allclose(f['teacher'], want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(metrics['mimic_loss'], saco.mimic_loss(f['zi'], want, 'mean'), rtol=1e-5)
  micro.objective.saco.teacher_checkpoint = ''
  with pytest.raises(ConfigError, match='teacher_checkpoint'):
    validate(micro)
