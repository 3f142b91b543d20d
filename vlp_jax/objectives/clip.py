"""CLIP: symmetric InfoNCE between L2-normalised image and text embeddings (docs/methods.md §0)."""
from __future__ import annotations

import jax

from vlp_jax.losses.contrastive import clip_infonce, l2_normalize
from vlp_jax.objectives.base import IMAGE_TOWER, OBJECTIVES, TEXT_TOWER, Objective, tower_rngs


@OBJECTIVES.register('clip')
class ClipObjective(Objective):

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
               train: bool = True) -> tuple[dict, dict]:
    """batch {'image': [B, H, W, 3], 'text': [B, L]} -> {'zi': [B, d], 'zt': [B, d]} L2-normalised float32,
    and the model state. Tower keys of row i: fold_in(rng[i], IMAGE_TOWER) and fold_in(rng[i], TEXT_TOWER)."""
    image, model_state = self.encode_image(params, model_state, batch['image'], train,
                                           rng=tower_rngs(rng, IMAGE_TOWER))
    text = self.encode_text(params, batch['text'], train=train, rng=tower_rngs(rng, TEXT_TOWER))
    return {'zi': l2_normalize(image['embed']), 'zt': l2_normalize(text['embed'])}, model_state

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    loss, metrics = clip_infonce(features['zi'], features['zt'], params['logit_scale'])
    return loss, {'clip_loss': loss, **metrics}
