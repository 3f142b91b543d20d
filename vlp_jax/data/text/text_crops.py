"""COSMOS text crops from long, multi-sentence captions: a global crop is 1 to 5 sentences sampled without
replacement and joined; a local crop is one sentence. Optionally the original (short) caption is one more sentence
of the pool, as DreamLIP, whose long captions COSMOS trains on, samples the raw caption beside the sub-captions.

How the crops of one example relate (COSMOS supplementary E.7 and the authors' `sample_dict`, mode `textcrop`): each
global crop is drawn on its own, so the two global crops, and a global and a local crop, may share sentences ("global
captions may or may not include local captions"); the local crops are drawn together, without replacement, so they
are distinct sentences while the pool has enough of them (`local_crops`).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from vlp_jax.data.storage.record_needs import RecordNeed

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+')


def split_sentences(text: str) -> list[str]:
  """'A cat. A dog!' -> ['A cat.', 'A dog!']; empty text -> []."""
  return [s for s in _SENTENCE_END.split(text.strip()) if s]


def global_crop(sentences: list[str], rng: np.random.Generator, max_sentences: int = 5) -> str:
  """1 to min(max_sentences, n) sentences, drawn without replacement, joined in the drawn order."""
  count = int(rng.integers(1, min(max_sentences, len(sentences)) + 1))
  return ' '.join(sentences[i] for i in rng.choice(len(sentences), size=count, replace=False))


def local_crops(sentences: list[str], rng: np.random.Generator, count: int) -> list[str]:
  """`count` one-sentence crops drawn without replacement from the n sentences. With count > n (a short pool) the
  pool is drawn again once it is used up: every sentence appears floor(count / n) or ceil(count / n) times, the
  extra ones a uniform subset (as the authors' `random_sample_from_list` "minimizing caption duplications")."""
  if count == 0:
    return []
  order = np.concatenate([rng.permutation(len(sentences)) for _ in range(-(-count // len(sentences)))])
  return [sentences[i] for i in order[:count]]


# Long captions may be missing from a few records (the converter leaves '' where its table has none); most must have
# one, or most crops are the short caption again.
LONG_CAPTION_MIN_FRACTION = 0.9


def long_caption_need(needed_by: str) -> RecordNeed:
  """What text crops need of the records: a long caption on (nearly) every one; `needed_by` names the setting."""
  return RecordNeed('long_caption', needed_by,
                    'its text crops are sentences of the long caption, and without one every crop is the short '
                    'caption again. Convert the data with long captions (python -m vlp_jax.convert ... '
                    '--long_captions=TABLE.json, docs/data.md; webdataset tars carry none)',
                    LONG_CAPTION_MIN_FRACTION)


def crop_pool(long_caption: str, caption: str, include_caption: bool = False) -> list[str]:
  """The sentences crops are drawn from: those of `long_caption`, plus `caption` when `include_caption` or when
  there is no long caption (then it is the only sentence)."""
  sentences = split_sentences(long_caption)
  return sentences + [caption] if include_caption or not sentences else sentences


def text_crops(long_caption: str, caption: str, rng: np.random.Generator, num_global: int = 2,
               num_local: int = 6, include_caption: bool = False, caption_first: bool = False,
               max_sentences: int = 5) -> list[str]:
  """num_global global crops (1 to `max_sentences` sentences), each drawn on its own, then num_local local crops
  drawn together without replacement (`local_crops`), from `crop_pool`. With `caption_first`, the first global crop
  is `caption` itself and the other crops are sampled as before.

  The global crops are drawn first, in order, so the first one depends only on the generator's state: a call with
  num_global=1, num_local=0 draws the same first crop (`FirstGlobalCrop`, CLIP's text under that option)."""
  sentences = crop_pool(long_caption, caption, include_caption)
  first = [caption] if caption_first and num_global else []
  return (first + [global_crop(sentences, rng, max_sentences) for _ in range(num_global - len(first))] +
          local_crops(sentences, rng, num_local))


@dataclasses.dataclass(frozen=True)
class FirstGlobalCrop:
  """(long_caption, caption, rng) -> the first global text crop COSMOS's views would draw with this generator state
  and these options (without `caption_first`, which would give the caption itself): a text for CLIP that is drawn
  from COSMOS's pool by COSMOS's sampler (`objective.text_source='text_crops'`)."""
  include_caption: bool = False
  max_sentences: int = 5

  def __call__(self, long_caption: str, caption: str, rng: np.random.Generator) -> str:
    return text_crops(long_caption, caption, rng, num_global=1, num_local=0, include_caption=self.include_caption,
                      max_sentences=self.max_sentences)[0]
