"""CLIP: symmetric InfoNCE between L2-normalised image and text embeddings (docs/methods.md §0).

`objective.text_source` picks the text of each pair: 'caption' (the record's caption, CLIP) or 'text_crops' (one
text crop drawn from COSMOS's pool by COSMOS's sampler, as COSMOS draws its first global text crop: a CLIP control
that sees exactly COSMOS's text; options `caption_in_text_crops` and `text_crop_max_sentences` as COSMOS's).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import ml_collections

from vlp_jax.data.text.text_crops import FirstGlobalCrop, long_caption_need
from vlp_jax.losses.contrastive import clip_infonce, l2_normalize, mean_offdiagonal_cosine
from vlp_jax.objectives.base import IMAGE_TOWER, OBJECTIVES, TEXT_TOWER, Objective, tower_rngs
from vlp_jax.registry import check_choice

TEXT_SOURCES = ('caption', 'text_crops')


@OBJECTIVES.register('clip')
class ClipObjective(Objective):

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    config = super().default_config()
    if cls.views.__func__ is not ClipObjective.views.__func__:
      return config  # a subclass with views of its own (SLIP) would ignore the text options: it does not take them
    return {**config,
            'text_source': 'caption',  # or 'text_crops' (see the module docstring)
            # with 'text_crops': the short caption as one more sentence of the pool (COSMOS's option of that name)
            'caption_in_text_crops': False,
            'text_crop_max_sentences': 5}  # with 'text_crops': a crop holds 1 to this many sentences

  @classmethod
  def validate(cls, options: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> None:
    del config
    if 'text_source' not in options:
      return
    check_choice('objective.text_source', options.text_source, TEXT_SOURCES)
    size = options.text_crop_max_sentences
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
      raise ValueError(f'config.objective.text_crop_max_sentences must be a positive integer, got {size!r}')

  @classmethod
  def record_needs(cls, options, config):
    del config
    if options.get('text_source', 'caption') != 'text_crops':
      return []
    return [long_caption_need("config.objective.text_source='text_crops'")]

  @classmethod
  def views(cls, config: ml_collections.ConfigDict):
    """CLIP's views (`Objective.views`), whose text is a text crop under `text_source='text_crops'`."""
    views = super().views(config)
    options = cls.options(config.objective)
    cls.validate(options, config)
    if options.text_source == 'caption':
      return views
    return dataclasses.replace(views, text_crop=FirstGlobalCrop(options.caption_in_text_crops,
                                                                options.text_crop_max_sentences))

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
