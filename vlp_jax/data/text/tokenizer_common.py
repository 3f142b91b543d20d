"""What the tokenizers (clip_bpe.py, siglip_sentencepiece.py, gemma_sentencepiece.py) share: the checks of their
arguments and the row of ids their `decode` reads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def ids_before_padding(ids: Iterable[int] | np.ndarray, pad_token: int) -> list[int]:
  """A 1-D sequence of ids `[n]` (one row of a tokenizer's output) without its trailing padding, as ints; raises
  on another shape or a non-integer dtype (what both tokenizers' `decode` take)."""
  arr = np.asarray(ids)
  if arr.ndim != 1:
    raise ValueError(f"decode expects a 1-D sequence of ids, got shape {arr.shape}")
  if arr.size and not np.issubdtype(arr.dtype, np.integer):
    raise TypeError(f"decode expects integer ids, got dtype {arr.dtype}")
  seq = arr.tolist()
  end = len(seq)
  while end and seq[end - 1] == pad_token:
    end -= 1
  return seq[:end]


def text_list(texts: str | Sequence[str]) -> list[str]:
  """One caption or a sequence of N captions -> a list of N str (TypeError for anything else)."""
  if isinstance(texts, str):
    return [texts]
  if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
    raise TypeError(f"texts must be a str or a sequence of str, got {type(texts).__name__}")
  texts = list(texts)
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
  return texts


def check_context_length(context_length, minimum: int = 2, room: str = "SOT and EOT") -> int:
  if isinstance(context_length, bool) or not isinstance(context_length, (int, np.integer)):
    raise TypeError(f"context_length must be an int, got {type(context_length).__name__}")
  if context_length < minimum:
    raise ValueError(f"context_length must be >= {minimum} (room for {room}), got {context_length}")
  return int(context_length)
