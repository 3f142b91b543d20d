"""CLIP's views: the host-side transform from a decoded example to one image and the tokenised caption (the
default `Objective.views`; SLIP, COSMOS and ZeroVL define their own beside their objectives)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import grain
import numpy as np

from vlp_jax.data.image import autoaugment, resolution_stages as resolution, transforms
from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, ImagePreprocessing
from vlp_jax.data.loading.pipeline import STEP_KEY, passthrough
from vlp_jax.data.text.tokenizer_factory import CLIP_BPE, cached_tokenizer


@dataclasses.dataclass
class ClipViews(grain.transforms.RandomMap):
  """A decoded example -> {'image': [S, S, 3] uint8 (normalised in the train step, `images_to_float`), 'text': [L]
  int32, 'label': []}.

  The views of CLIP and SigLIP (and the objectives built on them); SLIP and COSMOS supply their own. The image is
  resized as the model family's `preprocessing` says (OpenAI CLIP's shorter side and centre crop, as every method
  evaluates, or SigLIP's square resize), or, with
  `crop_scale` (e.g. (0.9, 1.0), open_clip's), a RandomResizedCrop; then `augment` ('randaugment', 'autoaugment',
  data/image/autoaugment.py) when it is not 'none'.

  The text is the example's `caption_field`, or with `text_crop` (CLIP's `objective.text_source='text_crops'`) a
  crop drawn from the caption and `long_caption`: text_crop(long_caption, caption, rng), after the image's draws.
  It is tokenised by the model's tokenizer: `tokenizer` and `tokenizer_path` are config.model.text's
  (`tokenizer.tokenizer_options`), strings that each data worker turns into its own cached tokenizer.
  """
  image_size: int
  context_length: int
  caption_field: str = 'caption'
  crop_scale: tuple[float, ...] = ()
  augment: str = 'none'
  text_crop: Callable[[str, str, np.random.Generator], str] | None = None  # e.g. text_crops.FirstGlobalCrop
  tokenizer: str = CLIP_BPE
  tokenizer_path: str = ''
  preprocessing: ImagePreprocessing = OPENAI_CLIP_PREPROCESSING  # the model's resize (config.model.preprocess)
  # staged resolution (data/image/resolution_stages.py): ((first batch index, image size), ...); an example's image is
  # at the size of the step its batch is for (pipeline.STEP_KEY); () or no step: image_size
  size_stages: tuple[tuple[int, int], ...] = ()

  def __post_init__(self):
    cached_tokenizer(self.tokenizer, self.tokenizer_path)  # a bad tokenizer setting fails here, not in a worker

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    size = self.image_size
    if self.size_stages and STEP_KEY in example:
      size = resolution.size_at(self.size_stages, example[STEP_KEY], self.image_size)
    if self.crop_scale:
      image = transforms.random_resized_crop(example['image'], size, tuple(self.crop_scale), rng)
    else:
      image = self.preprocessing.resize_image(example['image'], size)
    if self.augment != 'none':
      image = autoaugment.AUGMENTATIONS.get(self.augment)(image, rng)
    return {'image': image, 'text': self.text_tokens(example, rng), **passthrough(example)}

  def text_tokens(self, example: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    """The example's text as a [L] int32 token row, drawn after the image (a subclass may change the text)."""
    text = example[self.caption_field]
    if self.text_crop is not None:
      text = self.text_crop(example.get('long_caption', ''), text, rng)
    return cached_tokenizer(self.tokenizer, self.tokenizer_path)(text, context_length=self.context_length)[0]
