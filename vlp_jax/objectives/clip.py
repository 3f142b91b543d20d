"""CLIP: symmetric InfoNCE between L2-normalised image and text embeddings (docs/methods.md §0).

`ClipBase` is CLIP's pair (the two towers' embeddings and the loss), which objectives with views of their own build
on; the objective registered as 'clip' adds the text-source option of CLIP's views (objectives/text_source.py: the
COSMOS paper's CLIP baseline, trained on COSMOS's text crops).
"""
from __future__ import annotations

import jax

from vlp_jax.losses.contrastive import clip_infonce, l2_normalize, mean_offdiagonal_cosine
from vlp_jax.objectives.base import IMAGE_TOWER, OBJECTIVES, TEXT_TOWER, Objective, tower_rngs
from vlp_jax.objectives.text_source import TextSourceViews


class ClipBase(Objective):
  """CLIP's features and loss on one image-text pair per example, with `Objective`'s views and options."""

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
               train: bool = True) -> tuple[dict, dict]:
    """batch {'image': [B, H, W, 3], 'text': [B, L]} -> {'zi': [B, d], 'zt': [B, d]} L2-normalised float32,
    and the model state. Tower keys of row i: fold_in(rng[i], IMAGE_TOWER) and fold_in(rng[i], TEXT_TOWER)."""
    image, text, model_state = self.encode_pair(params, model_state, batch, rng, train)
    return {'zi': l2_normalize(image['embed']), 'zt': l2_normalize(text['embed'])}, model_state

  def encode_pair(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array, train: bool,
                  with_tokens: bool = False) -> tuple[dict, dict, dict]:
    """(the image tower's outputs, the text tower's, the model state) of batch 'image' and 'text', with the tower
    keys of `features`; the image's patch `tokens` too `with_tokens`."""
    image, model_state = self.encode_image(params, model_state, batch['image'], train, with_tokens=with_tokens,
                                           rng=tower_rngs(rng, IMAGE_TOWER))
    text = self.encode_text(params, batch['text'], train=train, rng=tower_rngs(rng, TEXT_TOWER))
    return image, text, model_state

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    loss, metrics = clip_infonce(features['zi'], features['zt'], params['logit_scale'])
    if self.log_batch_similarity:  # config.log.batch_similarity: how alike the batch's embeddings are (issue 64)
      metrics = {**metrics, 'image_batch_similarity': mean_offdiagonal_cosine(features['zi']),
                 'text_batch_similarity': mean_offdiagonal_cosine(features['zt'])}
    return loss, {'clip_loss': loss, **metrics}


@OBJECTIVES.register('clip')
class ClipObjective(ClipBase, TextSourceViews):
  """CLIP, whose text is the caption or a crop of COSMOS's text pool (`objective.text_source`)."""
