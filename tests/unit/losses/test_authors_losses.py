"""Our SLIP, ZeroVL and COSMOS losses against the authors' own code: the inputs, loss values and gradients that
their torch losses gave (tools/authors_losses_fixture.py; tests/fixtures/authors_losses/README.md names the
repositories, commits and functions). Each test runs our loss, jitted as in training, on the stored float32
inputs and compares its value and jax.grad with the stored ones, to float32 rounding."""
from __future__ import annotations

import functools
import os
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from support import TESTS
from vlp_jax import objectives
from vlp_jax.losses.contrastive import clip_infonce, l2_normalize, pairwise_sym_nce
from vlp_jax.losses.mixup import mixup_infonce
from vlp_jax.losses.simclr import simclr_loss

FIXTURES = os.path.join(TESTS, 'fixtures', 'authors_losses')
# Both sides compute in float32, summing in different orders. A scale's gradient sums terms over all the logits
# and cancels most of them: it differs by up to about 1e-5 relative (100 ulps); everything else by less than 1e-6.
RTOL = 2e-5
ATOL = 1e-6  # times the largest entry of the compared array when that is above 1


@functools.cache
def fixture(method: str) -> dict[str, np.ndarray]:
  """The arrays of tests/fixtures/authors_losses/<method>.npz."""
  with np.load(os.path.join(FIXTURES, f'{method}.npz')) as stored:
    return {k: stored[k] for k in stored.files}


def assert_matches(ours, theirs: np.ndarray, what: str) -> None:
  """Elementwise |ours - theirs| <= RTOL |theirs| + ATOL max(1, max|theirs|): the absolute part spares entries
  near zero a relative match."""
  theirs = np.asarray(theirs)
  atol = ATOL * max(1.0, float(np.max(np.abs(theirs))))
  np.testing.assert_allclose(np.asarray(ours), theirs, rtol=RTOL, atol=atol, err_msg=what)


def assert_gradients_match(grads: dict, stored: dict[str, np.ndarray], output: str) -> None:
  """grads {input name: our gradient} against stored['grad_<output>_wrt_<input name>']."""
  for name, grad in grads.items():
    assert_matches(grad, stored[f'grad_{output}_wrt_{name}'], f'd {output} / d {name}')


def value_and_grad(fn, argnums: tuple[int, ...], has_aux: bool = True):
  """jax.value_and_grad of fn, jitted as the train step runs the losses."""
  return jax.jit(jax.value_and_grad(fn, argnums=argnums, has_aux=has_aux))


def objective(name: str, model=None, **options) -> objectives.Objective:
  """The registered objective with its default options (but `options`), built without a model: `loss` reads only
  the features, the parameters and the options."""
  cls = objectives.OBJECTIVES.get(name)
  return cls(model, cls.options(ml_collections.ConfigDict({'name': name, **options})))


def test_simclr_loss_matches_slips_simclr_loss():
  """SLIP's SIMCLRLoss L2-normalises the head outputs itself; the gradient is with respect to the raw outputs."""
  stored = fixture('slip')
  tau = float(stored['ssl_temperature'])

  def loss(aug1_embed, aug2_embed):
    return simclr_loss(l2_normalize(aug1_embed), l2_normalize(aug2_embed), tau)

  (value, metrics), grads = value_and_grad(loss, (0, 1))(stored['aug1_embed'], stored['aug2_embed'])
  assert_matches(value, stored['ssl_loss'], 'ssl_loss')
  assert_matches(100 * metrics['ssl_acc'], stored['ssl_acc'], 'ssl_acc (theirs in percent)')
  assert_gradients_match(dict(zip(('aug1_embed', 'aug2_embed'), grads)), stored, 'ssl_loss')


def test_clip_infonce_matches_slips_clip_loss():
  """SLIP's CLIPLoss normalises both embeddings and takes the scale exp(log_scale), as its models compute it."""
  stored = fixture('slip')

  def loss(image_embed, text_embed, log_scale):
    return clip_infonce(l2_normalize(image_embed), l2_normalize(text_embed), log_scale)

  inputs = ('image_embed', 'text_embed', 'log_scale')
  (value, metrics), grads = value_and_grad(loss, (0, 1, 2))(*(stored[k] for k in inputs))
  assert_matches(value, stored['clip_loss'], 'clip_loss')
  assert_matches(100 * metrics['i2t_batch_acc'], stored['clip_acc'], 'clip_acc (theirs in percent)')
  assert_gradients_match(dict(zip(inputs, grads)), stored, 'clip_loss')


def test_slip_objective_loss_matches_slips_slip_loss_with_the_default_options():
  """Our SLIP objective at its defaults (c and tau, the paper's) against SLIPLoss at SLIP's defaults."""
  stored = fixture('slip')
  slip = objective('slip', model=types.SimpleNamespace(dtype=jnp.float32))  # the model's dtype sizes the head only

  def loss(embeds, log_scale):
    features = {'zi': l2_normalize(embeds['image_embed']), 'zt': l2_normalize(embeds['text_embed']),
                'ssl_a': l2_normalize(embeds['aug1_embed']), 'ssl_b': l2_normalize(embeds['aug2_embed'])}
    return slip.loss(features, {'logit_scale': log_scale}, jnp.int32(0))

  embeds = {k: stored[k] for k in ('image_embed', 'text_embed', 'aug1_embed', 'aug2_embed')}
  (value, metrics), (embed_grads, scale_grad) = value_and_grad(loss, (0, 1))(embeds, stored['log_scale'])
  assert_matches(value, stored['loss'], 'loss')
  assert_matches(metrics['clip_loss'], stored['clip_loss'], 'clip_loss')
  assert_matches(metrics['ssl_loss'], stored['ssl_loss'], 'ssl_loss')
  assert_gradients_match({**embed_grads, 'log_scale': scale_grad}, stored, 'loss')


def test_mixup_infonce_matches_zerovls_mixup_nce():
  """ZeroVL's MixUpNCE divides by a temperature parameter, ours multiplies by exp(log_scale): the gradient is taken
  with respect to the temperature, through log_scale = -log(temperature)."""
  stored = fixture('zerovl')

  def loss(zi, zt, temperature):
    return mixup_infonce(zi, zt, -jnp.log(temperature), stored['lam'])

  inputs = ('zi', 'zt', 'temperature')
  (value, metrics), grads = value_and_grad(loss, (0, 1, 2))(*(stored[k] for k in inputs))
  assert_matches(value, stored['loss'], 'loss')
  assert_matches(metrics['loss_i2t'], stored['loss_i2t'], 'loss_i2t (theirs: MixUpNCE(zi, zt))')
  assert_matches(metrics['loss_t2i'], stored['loss_t2i'], 'loss_t2i (theirs: MixUpNCE(zt, zi))')
  assert_gradients_match(dict(zip(inputs, grads)), stored, 'loss')


def test_zerovl_objective_loss_matches_zerovls_mixup_nce_with_a_learned_temperature():
  """Our ZeroVL objective at its defaults (the learned scale) reads lambda from the features."""
  stored = fixture('zerovl')
  zerovl = objective('zerovl')
  batch = stored['zi'].shape[0]

  def loss(zi, zt, temperature):
    features = {'zi': zi, 'zt': zt, 'mixup_lambda': jnp.full((batch,), stored['lam']),
                'mixup_coin': jnp.zeros((batch,))}  # tails: the texts were mixed, as in the fixture
    return zerovl.loss(features, {'logit_scale': -jnp.log(temperature)}, jnp.int32(0))

  inputs = ('zi', 'zt', 'temperature')
  (value, _), grads = value_and_grad(loss, (0, 1, 2))(*(stored[k] for k in inputs))
  assert_matches(value, stored['loss'], 'loss')
  assert_gradients_match(dict(zip(inputs, grads)), stored, 'loss')


def test_pairwise_sym_nce_matches_cosmos_clip_loss_over_crops():
  """COSMOS's CLIP term pairs the global image crops (the first two) with every text crop. These inputs feed
  that term only, so the stored gradients of the total loss are this term's."""
  stored = fixture('cosmos')
  num_global = stored['t_image_features'].shape[1]

  value, (image_grad, text_grad, scale_grad) = value_and_grad(pairwise_sym_nce, (0, 1, 2), has_aux=False)(
      stored['s_image_features'][:, :num_global], stored['s_text_features'], stored['log_scale'])
  assert_matches(value, stored['clip_loss'], 'clip_loss')
  assert_matches(image_grad, stored['grad_loss_wrt_s_image_features'][:, :num_global], 'd loss / d global images')
  assert_matches(text_grad, stored['grad_loss_wrt_s_text_features'], 'd loss / d texts')
  assert_matches(scale_grad, stored['grad_loss_wrt_log_scale'], 'd loss / d log_scale')


def test_cosmos_objective_loss_matches_cosmos_loss():
  """Our COSMOS objective's loss at its defaults (the paper's unweighted sum) against COSMOSLoss, term by term. The
  teacher's embeddings get no gradient on either side (theirs detaches them in the loss, ours in `features`), so
  only the student's inputs and the two scales are differentiated."""
  stored = fixture('cosmos')
  cosmos = objective('cosmos')
  num_global = stored['t_image_features'].shape[1]
  # The authors' loss gets every image crop and reads the global ones only (supplementary C.3); ours gets those.
  np.testing.assert_array_equal(stored['grad_loss_wrt_s_image_features'][:, num_global:], 0.0)
  student = {'cls_global': stored['s_image_features'][:, :num_global], 'eot': stored['s_text_features'],
             'h_img': stored['s_img_crossmodal_features'], 'h_txt': stored['s_txt_crossmodal_features']}
  teacher = {'teacher_cls': stored['t_image_features'], 'teacher_eot': stored['t_text_features']}
  params = {'logit_scale': stored['log_scale'], 'cosmos_logit_scale': stored['distill_log_scale']}

  def loss(student, params):
    return cosmos.loss({**student, **teacher}, params, jnp.int32(0))

  (value, metrics), (student_grads, param_grads) = value_and_grad(loss, (0, 1))(student, params)
  assert_matches(value, stored['loss'], 'loss')
  assert_matches(metrics['clip_loss'], stored['clip_loss'], 'clip_loss')
  assert_matches(metrics['cosmos_loss'], stored['distill_loss'], 'cosmos_loss (theirs: distill_loss)')
  theirs = {'cls_global': stored['grad_loss_wrt_s_image_features'][:, :num_global],
            'eot': stored['grad_loss_wrt_s_text_features'],
            'h_img': stored['grad_loss_wrt_s_img_crossmodal_features'],
            'h_txt': stored['grad_loss_wrt_s_txt_crossmodal_features'],
            'logit_scale': stored['grad_loss_wrt_log_scale'],
            'cosmos_logit_scale': stored['grad_loss_wrt_distill_log_scale']}
  for name, grad in {**student_grads, **param_grads}.items():
    assert_matches(grad, theirs[name], f'd loss / d {name}')


@pytest.mark.parametrize('method', ['slip', 'zerovl', 'cosmos'])
def test_fixture_arrays_are_float32(method):
  """The fixtures hold float32 arrays only, the precision both sides computed in."""
  assert {v.dtype for v in fixture(method).values()} == {np.dtype(np.float32)}
