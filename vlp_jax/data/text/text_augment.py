"""ZeroVL text augmentation (appendix A.9), word by word on the raw caption, then tokenised (host side, numpy).

"we ... use a percentage of 20% input words for processing. For each word, we mask it, replace it with a random word,
or delete it with a probability of 50%, 10% and 40%, respectively." The words are those of the caption as CLIP cleans
it (`tokenizer.clean_text`: ftfy, HTML unescaped, lowercase) split on whitespace, so punctuation stays with its word.
Each word is picked independently with probability 0.2; a picked word is
  masked:   it becomes ONE mask token, whatever its number of BPE pieces;
  replaced: it becomes one random vocabulary word, a single BPE token (`word_tokens`);
  deleted:  it is gone, and the words after it move up (so more of a long caption fits the context).
Untouched words keep exactly the BPE ids that tokenising the whole caption gives them (the BPE pre-tokeniser never
crosses whitespace, so encoding word by word and concatenating is encoding the caption). The row is then packed as
the tokenizer packs one: [SOT, ids..., EOT, 0, ...], cut to the context with EOT in the last slot.

(The authors' code differs from the paper's text here: it picks BERT WordPiece tokens, not words, and one [MASK] per
picked piece.)

It works on CLIP's BPE ids only (its mask, SOT and EOT ids are CLIP's): ZeroVL refuses `text_augment` for a model
with another tokenizer (`tokenizer.require_clip_bpe`) rather than feed it BPE ids.

The mask id. CLIP's BPE vocabulary has no [MASK] token, and adding one would change the embedding table (and break
OpenAI / open_clip checkpoints). We use the byte-level token 'ÿ</w>' (id 443): it stands for the single byte 0xFF,
which never occurs in UTF-8, so no cleaned caption ever encodes to it. Its embedding is therefore only ever trained
as the mask, which makes it a dedicated [MASK] in all but name. (Padding id 0 would not do: it is also '!', a real
token.)
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np

from vlp_jax.data.text.clip_bpe import clean_text, default_tokenizer

SOT_TOKEN = 49406
EOT_TOKEN = 49407
MASK_TOKEN = 443  # 'ÿ</w>': the byte 0xFF, never produced by encoding text (see the module docstring)

KEEP, MASK, REPLACE, DELETE = 0, 1, 2, 3


def caption_words(caption: str) -> list[str]:
  """The caption's words: its CLIP-cleaned text split on whitespace (punctuation stays attached to its word)."""
  return clean_text(caption).split()


@functools.lru_cache(maxsize=None)
def word_tokens() -> np.ndarray:
  """[V] int32: the vocabulary words a replaced word is drawn from.

  The captions' own words are not at hand in a data worker, so the vocabulary is CLIP's: the BPE ids t that are a
  whole word on their own, encode(decode(t)) == [t] (34277 of the 49406 ids; neither the mask, SOT, EOT nor a
  word-internal piece is one). A replaced word is therefore exactly one token, and the same one that writing the
  word in a caption would give. Computed once per process (about a second), on the first replacement.
  """
  tokenizer = default_tokenizer()
  return np.array([t for t in range(SOT_TOKEN) if tokenizer.encode(tokenizer.decode([t])) == [t]], np.int32)


def augment_plan(num_words: int, rng: np.random.Generator, prob: float = 0.2,
                 split: tuple[float, float, float] = (0.5, 0.1, 0.4)) -> np.ndarray:
  """[num_words] int8 action per word: KEEP, MASK, REPLACE or DELETE.

  Each word is picked independently with probability `prob`; a picked word is masked, replaced or deleted with the
  probabilities `split` (normalised). Draws rng.random(num_words) twice (pick, then action), so the plan depends
  only on the rng state and the number of words.
  """
  picked = rng.random(num_words) < prob
  weights = np.asarray(split, np.float64)
  action = np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(num_words), side='right')
  return np.where(picked, np.minimum(action, 2) + 1, KEEP).astype(np.int8)


def apply_plan(word_ids: Sequence[Sequence[int]], plan: np.ndarray, replacements: np.ndarray,
               mask_token: int = MASK_TOKEN) -> list[int]:
  """The augmented caption's BPE ids, without SOT / EOT: word w's ids [n_w] (len(word_ids) words), its action
  plan[w], its replacement id replacements[w] -> kept: its ids; masked: [mask_token]; replaced: [replacements[w]];
  deleted: nothing."""
  out: list[int] = []
  for ids, action, replacement in zip(word_ids, plan, replacements):
    if action == KEEP:
      out += ids
    elif action == MASK:
      out.append(mask_token)
    elif action == REPLACE:
      out.append(int(replacement))
  return out


def pack(ids: Sequence[int], context_length: int) -> np.ndarray:
  """[n] BPE ids -> [context_length] int32 row as the tokenizer packs a caption: [SOT, ids..., EOT, 0, ...], or, when
  the ids do not fit, [SOT, the first context_length - 2 ids, EOT]."""
  row = np.zeros(context_length, np.int32)
  ids = [SOT_TOKEN, *ids[:context_length - 2], EOT_TOKEN]
  row[:len(ids)] = ids
  return row


@dataclasses.dataclass(frozen=True)
class TextAugment:
  """caption (raw text), rng, context length L -> the augmented, tokenised caption [L] int32 (picklable, for grain
  workers).

  prob: fraction of the words picked; mask / replace / delete: how the picked ones are treated. Draws 3 uniforms per
  word from `rng` (pick, action, replacement), so with grain's per-example generator the row depends only on
  (seed, example index): deterministic, and exact under resume.
  """
  prob: float = 0.2
  mask: float = 0.5
  replace: float = 0.1
  delete: float = 0.4
  mask_token: int = MASK_TOKEN

  def __call__(self, caption: str, rng: np.random.Generator, context_length: int) -> np.ndarray:
    words = caption_words(caption)
    plan = augment_plan(len(words), rng, self.prob, (self.mask, self.replace, self.delete))
    uniforms = rng.random(len(words))
    replacements = np.zeros(len(words), np.int32)
    if (plan == REPLACE).any():  # the vocabulary is built only once something is replaced
      vocabulary = word_tokens()
      replacements = vocabulary[np.minimum((uniforms * len(vocabulary)).astype(np.int64), len(vocabulary) - 1)]
    tokenizer = default_tokenizer()
    word_ids = [tokenizer.encode(word) if action == KEEP else () for word, action in zip(words, plan)]
    return pack(apply_plan(word_ids, plan, replacements, self.mask_token), context_length)
