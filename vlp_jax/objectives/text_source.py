"""The COSMOS paper's CLIP baseline as a views option: `objective.text_source` picks the text of CLIP's views.

  'caption'     the record's caption (CLIP; the default, which draws nothing)
  'text_crops'  one text crop drawn from COSMOS's pool by COSMOS's sampler, as COSMOS draws its first global text
                crop (data/text/text_crops.py `FirstGlobalCrop`): a CLIP control that sees exactly COSMOS's text, with
                COSMOS's options `caption_in_text_crops` and `text_crop_max_sentences`

`TextSourceViews` adds these options to an objective whose views are CLIP's (`Objective.views`); the objectives
registered as 'clip' and 'siglip' take it. An objective that makes views of its own (SLIP, SigLIP 2, COSMOS, ZeroVL)
leaves it out, so that the options are unknown keys there rather than settings its views would ignore.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from vlp_jax.data.text.text_crops import FirstGlobalCrop, long_caption_need
from vlp_jax.objectives.base import Objective
from vlp_jax.registry import check_choice

TEXT_SOURCES = ('caption', 'text_crops')


class TextSourceViews(Objective):
  """CLIP's views with `objective.text_source` (module docstring). A mixin: list it after the objective's own base,
  e.g. `class ClipObjective(ClipBase, TextSourceViews)`, so that the objective's options come after these."""

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    return {**super().default_config(),
            'text_source': 'caption',  # or 'text_crops' (see the module docstring)
            # with 'text_crops': the short caption as one more sentence of the pool (COSMOS's option of that name)
            'caption_in_text_crops': False,
            'text_crop_max_sentences': 5}  # with 'text_crops': a crop holds 1 to this many sentences

  @classmethod
  def validate(cls, options: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> None:
    super().validate(options, config)
    check_choice('objective.text_source', options.text_source, TEXT_SOURCES)
    size = options.text_crop_max_sentences
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
      raise ValueError(f'config.objective.text_crop_max_sentences must be a positive integer, got {size!r}')

  @classmethod
  def record_needs(cls, options, config):
    needs = super().record_needs(options, config)
    if options.text_source != 'text_crops':
      return needs
    return [*needs, long_caption_need("config.objective.text_source='text_crops'")]

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
