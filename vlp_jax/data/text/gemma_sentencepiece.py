"""SigLIP 2's tokenizer: Gemma's SentencePiece model, read as siglip_sentencepiece.py reads SigLIP's, with Gemma's
own text handling and special tokens."""

from __future__ import annotations

import os

from vlp_jax.data.text.siglip_sentencepiece import SIGLIP_CONTEXT_LENGTH, SentencePieceTokenizer, load_model
from vlp_jax.data.text.tokenizer_common import check_context_length
from vlp_jax.errors import ConfigError

GEMMA_FILENAME = "tokenizer.model"  # transformers' name for Gemma's SentencePiece model (SigLIP 2's folders)
class GemmaSentencePieceTokenizer(SentencePieceTokenizer):
  """SigLIP 2's tokenizer: Gemma's SentencePiece model (transformers names the file ``tokenizer.model``) as
    big_vision's SigLIP 2 demo runs it and transformers' ``GemmaTokenizer(add_bos_token=False,
    add_eos_token=True)`` with ``padding='max_length', truncation=True, max_length=L`` gives it.

    Each caption is lowercased (nothing else: punctuation and spaces stay, unlike SigLIP's canonicalising) and
    encoded as the model spells it (Gemma's adds no leading ``'▁'``), without a start token; ``'<eos>'`` follows,
    cut to L ids keeping ``'<eos>'`` last, then right-padded with ``'<pad>'`` (id 0 in Gemma's vocabulary).
    Literal special tokens in a caption (``'<eos>'``) are plain text here, special tokens to transformers.
    Reads a SentencePiece model only; a ``tokenizer.json`` raises ConfigError.
    """

  def __init__(self, path: str | os.PathLike, context_length: int = SIGLIP_CONTEXT_LENGTH):
    self.context_length = check_context_length(context_length, minimum=1, room="the EOS")
    path = os.fspath(path)
    self.path = os.path.join(path, GEMMA_FILENAME) if os.path.isdir(path) else path
    if not os.path.isfile(self.path) or self.path.endswith(".json"):
      raise ConfigError(f"no Gemma SentencePiece model at {self.path!r}: expected the {GEMMA_FILENAME} that came with "
                        "the SigLIP 2 weights (a tokenizer.json is not read for Gemma), or a folder holding it")
    self._model = load_model(self.path)
    self.vocab_size: int = self._model.vocab_size
    ids = {text: self._model.piece_id(text) for text in ("<eos>", "<pad>", "<unk>")}
    if None in ids.values():
      raise ConfigError(f"{self.path!r} is not Gemma's SentencePiece model: it lacks "
                        f"{[text for text, i in ids.items() if i is None]}")
    self.eot_token, self.pad_token, self.unk_token = ids["<eos>"], ids["<pad>"], ids["<unk>"]

  def __repr__(self) -> str:
    return (f"GemmaSentencePieceTokenizer(path={self.path!r}, vocab_size={self.vocab_size}, "
            f"context_length={self.context_length})")

  def encode(self, text: str) -> list[int]:
    """Ids of one caption (lowercased here), without the EOS or padding."""
    if not isinstance(text, str):
      raise TypeError(f"encode expects a str, got {type(text).__name__}")
    return self._model._sp.encode(text.lower())
