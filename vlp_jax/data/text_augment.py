"""ZeroVL text augmentation on tokenised captions (host side, numpy): pick a fraction of the BPE tokens and mask,
replace or delete each picked one (ZeroVL appendix A.9: 20% of the words; 50% masked, 10% replaced by a random
word, 40% deleted).

Tokens are rows as the tokenizer packs them: [SOT, ids..., EOT, 0, ...] (or EOT in the last slot when truncated).
SOT, EOT and padding are never picked, so a row stays valid: SOT first, EOT the argmax (the text feature is read
there) and zeros after it.

The mask id. CLIP's BPE vocabulary has no [MASK] token, and adding one would change the embedding table (and break
OpenAI / open_clip checkpoints). We use the byte-level token 'ÿ</w>' (id 443): it stands for the single byte 0xFF,
which never occurs in UTF-8, so no cleaned caption ever encodes to it. Its embedding is therefore only ever trained
as the mask, which makes it a dedicated [MASK] in all but name. (Padding id 0 would not do: it is also '!', a real
token.)
"""
from __future__ import annotations

import dataclasses

import numpy as np

SOT_TOKEN = 49406
EOT_TOKEN = 49407
MASK_TOKEN = 443  # 'ÿ</w>': the byte 0xFF, never produced by encoding text (see the module docstring)

KEEP, MASK, REPLACE, DELETE = 0, 1, 2, 3


def content_positions(tokens: np.ndarray, sot: int = SOT_TOKEN, eot: int = EOT_TOKEN) -> np.ndarray:
  """[L] int -> [L] bool: the BPE tokens of the caption, i.e. before the EOT (the argmax) and neither SOT nor EOT."""
  before_eot = np.arange(len(tokens)) < np.argmax(tokens)
  return before_eot & (tokens != sot) & (tokens != eot)


def augment_plan(tokens: np.ndarray, rng: np.random.Generator, prob: float = 0.2,
                 split: tuple[float, float, float] = (0.5, 0.1, 0.4)) -> np.ndarray:
  """[L] int -> [L] int8 action per position: KEEP, MASK, REPLACE or DELETE.

  Each caption token is picked independently with probability `prob`; a picked token is masked, replaced or deleted
  with the probabilities `split` (normalised). The rng draws a fixed amount per call, so the plan depends only on
  the rng state and the row.
  """
  picked = (rng.random(len(tokens)) < prob) & content_positions(tokens)
  weights = np.asarray(split, np.float64)
  action = np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(len(tokens)), side='right')
  return np.where(picked, np.minimum(action, 2) + 1, KEEP).astype(np.int8)


def apply_plan(tokens: np.ndarray, plan: np.ndarray, replacements: np.ndarray, mask_token: int = MASK_TOKEN
               ) -> np.ndarray:
  """Apply `augment_plan`'s actions: [L] tokens, [L] plan, [L] replacement ids -> [L] tokens of the same dtype.

  Deleted tokens are removed and the rest shifted left, padding with 0 at the end, so EOT stays the argmax.
  """
  out = np.where(plan == MASK, mask_token, np.where(plan == REPLACE, replacements, tokens)).astype(tokens.dtype)
  kept = out[plan != DELETE]
  return np.concatenate([kept, np.zeros(len(tokens) - len(kept), tokens.dtype)])


@dataclasses.dataclass(frozen=True)
class TextAugment:
  """tokens [L] int, rng -> augmented tokens [L] (picklable, for grain workers).

  prob: fraction of caption tokens picked; mask / replace / delete: how the picked ones are treated.
  Replacements are uniform over the vocabulary below SOT, so they are never SOT, EOT or beyond.
  """
  prob: float = 0.2
  mask: float = 0.5
  replace: float = 0.1
  delete: float = 0.4
  mask_token: int = MASK_TOKEN

  def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    plan = augment_plan(tokens, rng, self.prob, (self.mask, self.replace, self.delete))
    replacements = rng.integers(0, SOT_TOKEN, len(tokens))
    return apply_plan(tokens, plan, replacements, self.mask_token)
