"""The tokenizer a model config names (``config.model.text.tokenizer`` and ``tokenizer_path``): CLIP's BPE
(clip_bpe.py), SigLIP's SentencePiece (siglip_sentencepiece.py) or SigLIP 2's Gemma SentencePiece
(gemma_sentencepiece.py), read once per process."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from vlp_jax.data.text.clip_bpe import Tokenizer, default_tokenizer
from vlp_jax.data.text.gemma_sentencepiece import GemmaSentencePieceTokenizer
from vlp_jax.data.text.siglip_sentencepiece import TOKENIZER_FILENAMES, SentencePieceTokenizer
from vlp_jax.errors import ConfigError
from vlp_jax.registry import check_choice

CLIP_BPE = "clip_bpe"
SENTENCEPIECE = "sentencepiece"
GEMMA = "gemma"  # SigLIP 2's tokenizer (GemmaSentencePieceTokenizer)
TOKENIZERS = (CLIP_BPE, SENTENCEPIECE, GEMMA)  # the values of config.model.text.tokenizer

def tokenizer_options(text_config: Mapping[str, Any] | Any) -> dict[str, str]:
  """``{'tokenizer': ..., 'tokenizer_path': ...}`` of a text config
    (``config.model.text``, a ConfigDict or dict), with the defaults of configs
    older than those keys (``'clip_bpe'``, ``''``): plain strings, cheap to pickle
    into data-worker transforms, which give them back to :func:`cached_tokenizer`."""
  path = text_config.get("tokenizer_path", "") or ""
  return {"tokenizer": text_config.get("tokenizer", CLIP_BPE), "tokenizer_path": os.fspath(path)}


@functools.lru_cache(maxsize=None)
def cached_tokenizer(tokenizer: str = CLIP_BPE, tokenizer_path: str = "") -> Tokenizer | SentencePieceTokenizer:
  """The process-wide tokenizer for ``config.model.text.tokenizer`` and
    ``tokenizer_path`` (read once per process and pair; failures are not cached).

    Args:
        tokenizer: ``'clip_bpe'`` (:func:`default_tokenizer`; ``tokenizer_path``
            is not read) or ``'sentencepiece'`` (:class:`SentencePieceTokenizer`
            of ``tokenizer_path``).
        tokenizer_path: the SentencePiece model, ``tokenizer.json`` or their
            folder.

    Raises:
        ConfigError (a ValueError) naming the config key: an unknown
        ``tokenizer`` (with the valid choices), an empty ``tokenizer_path`` for
        ``'sentencepiece'``, or a path with no readable tokenizer.
    """
  try:
    check_choice("model.text.tokenizer", tokenizer, TOKENIZERS)
  except ValueError as error:
    raise ConfigError(str(error)) from None
  if tokenizer == CLIP_BPE:
    return default_tokenizer()
  if not tokenizer_path:
    raise ConfigError(f"config.model.text.tokenizer={tokenizer!r} needs config.model.text.tokenizer_path: the "
                      f"{' or '.join(TOKENIZER_FILENAMES)} of the weights, or the folder holding it")
  try:
    return (GemmaSentencePieceTokenizer if tokenizer == GEMMA else SentencePieceTokenizer)(tokenizer_path)
  except ConfigError as error:
    raise ConfigError(f"config.model.text.tokenizer_path={tokenizer_path!r}: {error}") from None


def tokenizer_for(text_config: Mapping[str, Any] | Any) -> Tokenizer | SentencePieceTokenizer:
  """The tokenizer a model's text config names (``config.model.text``, a
    ConfigDict or dict): :func:`default_tokenizer` for ``tokenizer='clip_bpe'``
    (the default), a :class:`SentencePieceTokenizer` of ``tokenizer_path`` for
    ``'sentencepiece'``. Cached: repeated calls return the same object.

    Raises:
        ConfigError (a ValueError), see :func:`cached_tokenizer`.
    """
  options = tokenizer_options(text_config)
  return cached_tokenizer(options["tokenizer"], options["tokenizer_path"])


def vocabulary_size(text_config: Mapping[str, Any] | Any) -> int:
  """The number of ids the tokenizer of a model's text config (``config.model.text``) emits: its largest id + 1,
    special tokens included. The text tower's embedding table (``config.model.text.vocab_size`` rows) must hold
    them all.

    Raises:
        ConfigError (a ValueError), see :func:`cached_tokenizer`.
    """
  tokenizer = tokenizer_for(text_config)
  specials = (getattr(tokenizer, "sot_token", None), tokenizer.eot_token, tokenizer.pad_token)
  return max([tokenizer.vocab_size, *(int(t) + 1 for t in specials if t is not None)])


def require_clip_bpe(text_config: Mapping[str, Any] | Any, what: str) -> None:
  """Raise ConfigError (a ValueError) when the model's tokenizer is not CLIP's
    BPE, which ``what`` (e.g. ``'config.objective.text_augment'``) needs: it
    reads or writes BPE ids, and would give another tokenizer's model wrong ids.
    """
  kind = tokenizer_options(text_config)["tokenizer"]
  if kind != CLIP_BPE:
    raise ConfigError(f"{what} needs CLIP's BPE tokenizer (config.model.text.tokenizer={CLIP_BPE!r}); this model's "
                      f"is config.model.text.tokenizer={kind!r}")
