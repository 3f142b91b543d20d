"""COSMOS text crops from long, multi-sentence captions: a global crop is 1 to 5 sentences sampled without
replacement and joined; a local crop is one sentence. Optionally the original (short) caption is one more sentence
of the pool, as DreamLIP, whose long captions COSMOS trains on, samples the raw caption beside the sub-captions."""
from __future__ import annotations

import re

import numpy as np

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+')


def split_sentences(text: str) -> list[str]:
  """'A cat. A dog!' -> ['A cat.', 'A dog!']; empty text -> []."""
  return [s for s in _SENTENCE_END.split(text.strip()) if s]


def global_crop(sentences: list[str], rng: np.random.Generator, max_sentences: int = 5) -> str:
  """1 to min(max_sentences, n) sentences, drawn without replacement, joined in the drawn order."""
  count = int(rng.integers(1, min(max_sentences, len(sentences)) + 1))
  return ' '.join(sentences[i] for i in rng.choice(len(sentences), size=count, replace=False))


def local_crop(sentences: list[str], rng: np.random.Generator) -> str:
  return sentences[int(rng.integers(len(sentences)))]


def text_crops(long_caption: str, caption: str, rng: np.random.Generator, num_global: int = 2,
               num_local: int = 6, include_caption: bool = False, caption_first: bool = False) -> list[str]:
  """num_global global crops then num_local local crops, sampled independently from the sentences of
  `long_caption`, plus `caption` (the short one) as one more sentence when `include_caption`. With
  `caption_first`, the first global crop is `caption` itself and the other crops are sampled as before. Examples
  without a long caption use `caption` as their only sentence."""
  sentences = split_sentences(long_caption)
  if include_caption or not sentences:
    sentences = sentences + [caption]
  first = [caption] if caption_first and num_global else []
  return (first + [global_crop(sentences, rng) for _ in range(num_global - len(first))] +
          [local_crop(sentences, rng) for _ in range(num_local)])
