"""CLIP's views: the host-side transform from a decoded example to one image and the tokenised caption (the
default `Objective.views`; SLIP, COSMOS and ZeroVL define their own beside their objectives)."""
from __future__ import annotations

import dataclasses
from typing import Any

import grain
import numpy as np

from vlp_jax.data import autoaugment, transforms
from vlp_jax.data.image_ops import resize_image
from vlp_jax.data.pipeline import passthrough
from vlp_jax.data.tokenizer import default_tokenizer


@dataclasses.dataclass
class ClipViews(grain.transforms.RandomMap):
  """A decoded example -> {'image': [S, S, 3] uint8 (normalised in the train step, `images_to_float`), 'text': [L]
  int32, 'label': []}.

  The views of CLIP and SigLIP (and the objectives built on them); SLIP and COSMOS supply their own. The image is
  resized (shorter side) and centre-cropped, as OpenAI's CLIP trains and every method evaluates, or, with
  `crop_scale` (e.g. (0.9, 1.0), open_clip's), a RandomResizedCrop; then `augment` ('randaugment', 'autoaugment',
  data/autoaugment.py) when it is not 'none'.
  """
  image_size: int
  context_length: int
  caption_field: str = 'caption'
  crop_scale: tuple[float, ...] = ()
  augment: str = 'none'

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    if self.crop_scale:
      image = transforms.random_resized_crop(example['image'], self.image_size, tuple(self.crop_scale), rng)
    else:
      image = resize_image(example['image'], self.image_size)
    if self.augment != 'none':
      image = autoaugment.AUGMENTATIONS.get(self.augment)(image, rng)
    return {'image': image,
            'text': default_tokenizer()(example[self.caption_field], context_length=self.context_length)[0],
            **passthrough(example)}
