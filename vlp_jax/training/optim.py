"""AdamW with a weight-decay mask, warmup + cosine schedule, and the logit-scale clamp (optax)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import optax

from vlp_jax.parallel import stacked_axes


def learning_rate_schedule(optim: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Linear warmup from `warmup_init_lr` to `lr` over `warmup_steps`, then cosine (or constant) to `lr * end_factor`."""
  if optim.schedule == 'constant':
    return optax.join_schedules(
        [optax.linear_schedule(optim.warmup_init_lr, optim.lr, max(optim.warmup_steps, 1)),
         optax.constant_schedule(optim.lr)], [optim.warmup_steps])
  return optax.warmup_cosine_decay_schedule(
      init_value=optim.warmup_init_lr, peak_value=optim.lr, warmup_steps=optim.warmup_steps,
      decay_steps=max(total_steps, optim.warmup_steps + 1), end_value=optim.lr * optim.end_factor)


def weight_decay_mask(params: dict) -> dict:
  """True where weight decay applies: matrices and kernels (ndim >= 2, not counting the layer axis of scanned
  blocks). Gains, biases, the class embedding (ndim 1) and logit scales (ndim 0) are never decayed."""
  return jax.tree_util.tree_map_with_path(lambda path, p: jnp.ndim(p) - stacked_axes(path) >= 2, params)


def make_optimizer(optim: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
  chain = []
  if optim.grad_clip_norm > 0:
    chain.append(optax.clip_by_global_norm(optim.grad_clip_norm))
  chain.append(optax.adamw(learning_rate_schedule(optim, total_steps), b1=optim.b1, b2=optim.b2, eps=optim.eps,
                           weight_decay=optim.weight_decay, mask=weight_decay_mask))
  return optax.chain(*chain)


MAX_LOG_LOGIT_SCALE = math.log(100.0)


def clamp_logit_scales(params: dict, max_log_scale: float = MAX_LOG_LOGIT_SCALE) -> dict:
  """Clip every parameter named `*logit_scale` (stored as a log) to [0, max_log_scale]."""
  def clamp(path, x):
    name = getattr(path[-1], 'key', '')
    return jnp.clip(x, 0.0, max_log_scale) if str(name).endswith('logit_scale') else x
  return jax.tree_util.tree_map_with_path(clamp, params)
