"""Parameter groups that start late (`Objective.late_starts`, SigLIP 2's self-distillation heads) stay out of AdamW's
decoupled weight decay until their start, against a naive numpy AdamW; the other groups' updates are optax's own,
bit for bit. And the logit-scale bound is the objective's: none for the sigmoid loss (an imported scale of 118
survives a step), CLIP's 100 for the softmax loss."""
import math

import jax
import numpy as np
import optax
import pytest

from support import initial_state, run_steps
from vlp_jax import models, objectives, parallel
from vlp_jax.config import base_config
from vlp_jax.training import optim

START, STEPS = 4, 9


def _optim(**changes):
  config = base_config().optim
  config.update(lr=0.05, warmup_init_lr=0.0, warmup_steps=2, schedule='cosine', end_factor=0.1, weight_decay=0.5,
                grad_clip_norm=0.0, **changes)
  return config


def _grads(step, rng):
  """Random gradients, the late head's zero before its start (it is not in the loss yet)."""
  head = rng.normal(size=(3, 2)) if step >= START else np.zeros((3, 2))
  return {'late_head': {'kernel': head, 'bias': rng.normal(size=2) if step >= START else np.zeros(2)},
          'proj': rng.normal(size=(2, 3)), 'logit_scale': rng.normal(size=())}


def naive_adamw(params, grads_at, config, total_steps, late_starts, steps):
  """AdamW in float64 from its definition (Loshchilov & Hutter; optax's order: Adam's bias-corrected direction plus
  wd * p, times the lr), with decay applied to matrices only, and for a late group only from its start."""
  schedule = optim.learning_rate_schedule(config, total_steps)
  flat = {k: np.asarray(v, np.float64) for k, v in _flatten(params).items()}
  mu = {k: np.zeros_like(v) for k, v in flat.items()}
  nu = {k: np.zeros_like(v) for k, v in flat.items()}
  history = []
  for t in range(steps):
    grads = _flatten(grads_at(t))
    lr = float(schedule(t))
    for k, p in flat.items():
      g = grads[k]
      mu[k] = config.b1 * mu[k] + (1 - config.b1) * g
      nu[k] = config.b2 * nu[k] + (1 - config.b2) * g * g
      direction = (mu[k] / (1 - config.b1 ** (t + 1))) / (np.sqrt(nu[k] / (1 - config.b2 ** (t + 1))) + config.eps)
      decays = p.ndim >= 2 and t >= late_starts.get(k.split('/')[0], 0)
      flat[k] = p - lr * (direction + (config.weight_decay * p if decays else 0.0))
    history.append(dict(flat))
  return history


def _flatten(tree):
  return {'/'.join(str(key.key) for key in path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_a_late_group_is_not_decayed_before_its_start():
  config = _optim()
  params = {'late_head': {'kernel': np.ones((3, 2), np.float32), 'bias': np.ones(2, np.float32)},
            'proj': np.full((2, 3), 0.5, np.float32), 'logit_scale': np.float32(math.log(10))}
  tx = optim.make_optimizer(config, STEPS + 1, {'late_head': START})
  plain = optim.make_optimizer(config, STEPS + 1)
  rng = np.random.default_rng(0)
  grads = [jax.tree.map(lambda g: np.asarray(g, np.float32), _grads(t, rng)) for t in range(STEPS)]
  want = naive_adamw(params, lambda t: grads[t], config, STEPS + 1, {'late_head': START}, STEPS)
  state, p, plain_state, q = tx.init(params), params, plain.init(params), params
  for t in range(STEPS):
    updates, state = tx.update(grads[t], state, p)
    p = optax.apply_updates(p, updates)
    plain_updates, plain_state = plain.update(grads[t], plain_state, q)
    q = optax.apply_updates(q, plain_updates)
    got = _flatten(p)
    if t < START:  # no gradient and no decay: exactly as initialised
      np.testing.assert_array_equal(got['late_head/kernel'], 1.0)
    for key, value in want[t].items():
      np.testing.assert_allclose(got[key], value, rtol=2e-5, atol=1e-6, err_msg=f'{key} after step {t}')
    # The groups that train from step 0 take optax.adamw's updates bit for bit.
    np.testing.assert_array_equal(got['proj'], _flatten(q)['proj'])
    np.testing.assert_array_equal(got['logit_scale'], _flatten(q)['logit_scale'])
  # Plain AdamW shrinks the idle head (the defect: at siglip2_webli's length, to 0); from its start it decays.
  assert _flatten(q)['late_head/kernel'][0, 0] < want[START - 1]['late_head/kernel'][0, 0] == 1.0


def test_a_late_group_beside_a_locked_tower():
  """With a locked text tower (multi_transform's labels around AdamW) the late group is still held until its start,
  and the locked projection never moves."""
  config = _optim(lock_text=True)
  params = {'late_head': {'kernel': np.ones((3, 2), np.float32)}, 'text_projection': np.ones((2, 3), np.float32),
            'proj': np.ones((2, 3), np.float32)}
  tx = optim.make_optimizer(config, STEPS + 1, {'late_head': START})
  state, p = tx.init(params), params
  rng = np.random.default_rng(1)
  for t in range(STEPS):
    grads = {'late_head': {'kernel': rng.normal(size=(3, 2)) * (t >= START)},
             'text_projection': rng.normal(size=(2, 3)), 'proj': rng.normal(size=(2, 3))}
    updates, state = tx.update(jax.tree.map(np.float32, grads), state, p)
    p = optax.apply_updates(p, updates)
    np.testing.assert_array_equal(p['text_projection'], 1.0)
    assert (np.all(p['late_head']['kernel'] == 1.0)) == (t < START), t
    assert np.all(p['proj'] != 1.0) or t == 0  # lr 0 at step 0 (warmup from 0)


def test_late_starts_leave_the_chain_of_other_objectives_unchanged():
  """With no late group the optimizer state is optax.adamw's, so checkpoints of every other objective resume."""
  params = {'proj': np.ones((2, 3), np.float32)}
  config = _optim()
  assert (jax.tree.structure(optim.make_optimizer(config, 10, {}).init(params))
          == jax.tree.structure(optim.make_optimizer(config, 10).init(params)))


def test_siglip2_names_its_heads_and_mask_token_as_late(micro):
  micro.objective.name = 'siglip2'
  micro.total_steps = 10
  objective = objectives.build(micro, models.build_model(micro.model))
  assert objective.late_starts() == {'siglip2_distill_head': 8, 'siglip2_masked_head': 8, 'siglip2_mask_token': 8}
  micro.objective.distill_start_fraction = 0.0  # on from step 0: nothing starts late
  assert objectives.build(micro, models.build_model(micro.model)).late_starts() == {}
  micro.objective.name = 'clip'
  assert objectives.build(micro, models.build_model(micro.model)).late_starts() == {}


# ------------------------------------------------------------------------------------------------ the logit scale

RELEASED_SIGLIP_SCALE = 118.0  # big_vision's SigLIP L/16-384 demo


@pytest.mark.slow
@pytest.mark.parametrize('name,bound', [('siglip', None), ('clip', math.log(100.0))])
def test_an_imported_logit_scale_above_100_is_bounded_only_by_softmax_objectives(micro, name, bound):
  """A train step of the sigmoid objective keeps a scale of 118 (its update is tiny at this lr); the softmax CLIP
  objective clips it to 100, exactly as before."""
  micro.objective.name = name
  micro.optim.update(lr=1e-6, warmup_steps=0)
  initial = initial_state(micro)
  initial = initial.replace(params={**initial.params, 'logit_scale': np.float32(math.log(RELEASED_SIGLIP_SCALE))})
  params, _, _ = run_steps(micro, parallel.make_mesh(1, jax.devices()[:1]), steps=1, state=initial)
  if bound is None:
    np.testing.assert_allclose(np.exp(float(params['logit_scale'])), RELEASED_SIGLIP_SCALE, rtol=1e-4)
  else:
    assert params['logit_scale'] == np.float32(bound)  # clipped to 100
