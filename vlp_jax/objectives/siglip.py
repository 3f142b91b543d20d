"""SigLIP: the pairwise sigmoid loss with a learnable logit scale (init log 10) and bias (init -10).

`SiglipBase` is SigLIP's pair (CLIP's features, the sigmoid loss), which SigLIP 2 builds on with views of its own; the
objective registered as 'siglip' takes CLIP's views with their text-source option (objectives/text_source.py)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from vlp_jax.losses.contrastive import siglip_loss
from vlp_jax.objectives.base import OBJECTIVES
from vlp_jax.objectives.clip import ClipBase
from vlp_jax.objectives.text_source import TextSourceViews


class SiglipBase(ClipBase):
  """Same features as CLIP; set `config.model.init_logit_scale = log(10)` as SigLIP does. A model with its own
  `logit_bias` (a SigLIP preset, `config.model.init_logit_bias`) keeps it: imported weights bring theirs.

  The logit scale has no upper bound (softmax CLIP's is 100): big_vision's sigmoid models train without one, and
  released SigLIP checkpoints sit above 100 (about 118 for L/16-384), which a bound would clip on the first step."""
  max_log_logit_scale = None

  @classmethod
  def default_config(cls):
    return {**super().default_config(), 'name': cls.name, 'init_logit_bias': -10.0}

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    params, model_state = super().init_variables(rng)
    if 'logit_bias' in params:
      return params, model_state
    return {**params, 'logit_bias': jnp.float32(self.config.init_logit_bias)}, model_state

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    loss, metrics = siglip_loss(features['zi'], features['zt'], params['logit_scale'], params['logit_bias'])
    return loss, {'siglip_loss': loss, **metrics}


@OBJECTIVES.register('siglip')
class SiglipObjective(SiglipBase, TextSourceViews):
  """SigLIP on CLIP's views, whose text is the caption or a crop of COSMOS's text pool (`objective.text_source`)."""
