"""CLIP: symmetric InfoNCE between L2-normalised image and text embeddings (METHODS.md section 0)."""
from __future__ import annotations

import jax

from vlp_jax.losses.contrastive import clip_infonce, l2_normalize
from vlp_jax.objectives.base import OBJECTIVES, Objective


@OBJECTIVES.register('clip')
class ClipObjective(Objective):

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
               train: bool = True) -> tuple[dict, dict]:
    """batch {'image': [B, H, W, 3], 'text': [B, L]} -> {'zi': [B, d], 'zt': [B, d]} L2-normalised float32,
    and the model state."""
    del rng  # no dropout or stochastic depth in the towers
    image, model_state = self.encode_image(params, model_state, batch['image'], train)
    text = self.encode_text(params, batch['text'])
    return {'zi': l2_normalize(image['embed']), 'zt': l2_normalize(text['embed'])}, model_state

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    loss, metrics = clip_infonce(features['zi'], features['zt'], params['logit_scale'])
    return loss, {'clip_loss': loss, **metrics}
