"""CLIP: symmetric InfoNCE between L2-normalised image and text embeddings (METHODS.md section 0)."""
from __future__ import annotations

import jax

from vlp_jax.losses.contrastive import clip_infonce, l2_normalize
from vlp_jax.objectives.base import Objective, register


@register('clip')
class ClipObjective(Objective):

  def features(self, params: dict, batch: dict[str, jax.Array], rng: jax.Array, train: bool = True) -> dict:
    """batch {'image': [B, H, W, 3], 'text': [B, L]} -> {'zi': [B, d], 'zt': [B, d]}, L2-normalised float32."""
    del rng, train  # no dropout or stochastic depth in the towers
    variables = {'params': params}
    image = self.model.apply(variables, batch['image'], method=self.model.encode_image)
    text = self.model.apply(variables, batch['text'], method=self.model.encode_text)
    return {'zi': l2_normalize(image['embed']), 'zt': l2_normalize(text['embed'])}

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    loss, metrics = clip_infonce(features['zi'], features['zt'], params['logit_scale'])
    return loss, {'clip_loss': loss, **metrics}
