"""SigLIP's SentencePiece tokenizer (the text tower of transformers' ``SiglipModel`` and open_clip's
``ViT-*-SigLIP``): :class:`SentencePieceTokenizer` reads the ``spiece.model`` (with ``sentencepiece``) or the
``tokenizer.json`` (with ``tokenizers``) shipped beside those weights and gives the ids transformers'
``SiglipTokenizer`` gives."""

from __future__ import annotations

import os
import re as _stdlib_re
import string
from collections.abc import Iterable, Sequence

import numpy as np

from vlp_jax.data.text.tokenizer_common import check_context_length, ids_before_padding, text_list
from vlp_jax.errors import ConfigError

SIGLIP_CONTEXT_LENGTH = 64  # SiglipTokenizer's model_max_length
SPIECE_FILENAME = "spiece.model"
TOKENIZER_JSON_FILENAME = "tokenizer.json"
# What a tokenizer folder is searched for, in order of preference.
TOKENIZER_FILENAMES = (SPIECE_FILENAME, TOKENIZER_JSON_FILENAME)

# SiglipTokenizer's special tokens (its defaults): '</s>' ends every row and also pads it; text the vocabulary cannot
# spell is '<unk>'.
_EOS_TEXT = "</s>"
_UNK_TEXT = "<unk>"
_PAD_TEXT = "</s>"
_SPIECE_UNDERLINE = "\u2581"  # SentencePiece's word-start mark
_DELETE_PUNCTUATION = str.maketrans("", "", string.punctuation)
_WHITESPACE_RUN_RE = _stdlib_re.compile(r"\s+")


def canonicalize_text(text: str) -> str:
  """Normalise a caption as SigLIP does before SentencePiece (big_vision's
    ``canonicalize_text``, as transformers' ``SiglipTokenizer`` runs it).

    Steps: lowercase; delete ASCII punctuation (``string.punctuation``, so
    ``"dog's"`` becomes ``"dogs"``; other punctuation such as ``"…"`` stays);
    collapse every whitespace run to one space; strip.
    """
  text = text.lower().translate(_DELETE_PUNCTUATION)
  return _WHITESPACE_RUN_RE.sub(" ", text).strip()


class _SentencePieceModel:
  """A ``spiece.model`` read with the ``sentencepiece`` package; pickles as the model's bytes."""

  def __init__(self, data: bytes):
    import sentencepiece  # only SentencePiece models need it

    self._data = data
    self._sp = sentencepiece.SentencePieceProcessor(model_proto=data)
    self.vocab_size: int = self._sp.get_piece_size()
    # SiglipTokenizer encodes '<unk>' + text and drops the pieces of '<unk>', so that a chunk gets no dummy '▁'
    # prefix of its own: the caller marks the start of the text with '▁' itself.
    self._unk_pieces = len(self._sp.encode(_UNK_TEXT, out_type=str))

  def __getstate__(self):
    return {"data": self._data}

  def __setstate__(self, state):
    self.__init__(state["data"])

  def piece_id(self, piece: str) -> int | None:
    """Id of a vocabulary piece; None when the vocabulary has no such piece."""
    i = self._sp.piece_to_id(piece)
    return i if self._sp.id_to_piece(i) == piece else None

  def chunk(self, text: str) -> tuple[list[str], list[int]]:
    """(pieces, ids) of canonical text without special tokens, as SiglipTokenizer's ``_tokenize`` and
        ``convert_tokens_to_ids`` give them."""
    pieces = self._sp.encode(_UNK_TEXT + text, out_type=str)
    if len(pieces) >= self._unk_pieces:
      pieces = pieces[self._unk_pieces:]
    # piece_to_id maps the surface of unknown text to the '<unk>' id, as transformers does.
    return pieces, [self._sp.piece_to_id(p) for p in pieces]

  def decode(self, ids: list[int]) -> str:
    return self._sp.decode(ids)


class _TokenizersModel:
  """A Hugging Face ``tokenizer.json`` read with the ``tokenizers`` package; pickles as its JSON text."""

  def __init__(self, text: str):
    import tokenizers  # only tokenizer.json files need it

    self._json = text
    self._tok = tokenizers.Tokenizer.from_str(text)
    # Rows are cut and padded below, as SiglipTokenizer does, whatever the file asks for.
    self._tok.no_truncation()
    self._tok.no_padding()
    self.vocab_size: int = self._tok.get_vocab_size(with_added_tokens=True)

  def __getstate__(self):
    return {"json": self._json}

  def __setstate__(self, state):
    self.__init__(state["json"])

  def piece_id(self, piece: str) -> int | None:
    return self._tok.token_to_id(piece)

  def chunk(self, text: str) -> tuple[list[str], list[int]]:
    """(pieces, ids) of canonical text without special tokens. The file's normaliser and pre-tokeniser (a
        converted SentencePiece model's) put the '▁' prefix that the leading mark stands for."""
    encoding = self._tok.encode(text.replace(_SPIECE_UNDERLINE, " ").strip(), add_special_tokens=False)
    return list(encoding.tokens), list(encoding.ids)

  def decode(self, ids: list[int]) -> str:
    return self._tok.decode(ids, skip_special_tokens=False)


def resolve_tokenizer_file(path: str | os.PathLike) -> str:
  """The SentencePiece tokenizer file ``path`` names: the file itself, or in a
    folder its ``spiece.model``, else its ``tokenizer.json``.

    Raises:
        ConfigError (a ValueError) naming ``path`` and the files looked for
        when there is no such file.
    """
  path = os.fspath(path)
  wanted = " or ".join(TOKENIZER_FILENAMES)
  if os.path.isdir(path):
    for name in TOKENIZER_FILENAMES:
      candidate = os.path.join(path, name)
      if os.path.isfile(candidate):
        return candidate
    raise ConfigError(f"the folder {path!r} holds no SentencePiece tokenizer: looked for {wanted} in it")
  if not os.path.isfile(path):
    raise ConfigError(f"no SentencePiece tokenizer at {path!r}: expected a {wanted} file, or a folder holding one")
  return path


def load_model(path: str) -> _SentencePieceModel | _TokenizersModel:
  """A tokenizer file -> its model: ``*.json`` through ``tokenizers``, any other file (``spiece.model``, ``*.spm``)
  through ``sentencepiece``."""
  with open(path, "rb") as f:
    data = f.read()
  try:
    if path.endswith(".json"):
      return _TokenizersModel(data.decode("utf-8"))
    return _SentencePieceModel(data)
  except ImportError:
    raise
  except Exception as error:  # the packages raise RuntimeError, OSError, Exception... on a malformed file
    kind = "a tokenizers tokenizer.json" if path.endswith(".json") else "a SentencePiece model"
    raise ConfigError(f"{path!r} is not {kind}: {error}") from None


class SentencePieceTokenizer:
  """SigLIP's SentencePiece tokenizer producing fixed-length int32 id arrays.

    Rows are those of transformers' ``SiglipTokenizer(vocab_file=path)`` as
    SigLIP's processor calls it, ``tokenizer(texts, padding='max_length',
    truncation=True, max_length=L)['input_ids']``: each caption is
    :func:`canonicalize_text`-ed, encoded without a start token, followed by the
    EOS ``'</s>'``, cut to L ids keeping the EOS last, and right-padded to exactly
    L ids with the pad id (``'</s>'`` too). The padding matters: SigLIP's text
    tower pools its last position.

    Literal ``'</s>'`` and ``'<unk>'`` in a caption are special tokens, as in
    transformers. A ``tokenizer.json`` (read with ``tokenizers``) encodes with
    the file's own normaliser and pre-tokeniser: the same ids as the
    ``spiece.model`` it was converted from, except right after such a literal
    special token (SentencePiece then segments the next word without its ``'▁'``).

    Attributes:
        path: the file read (a SentencePiece model or a ``tokenizer.json``).
        vocab_size: number of ids.
        eot_token: id of ``'</s>'``, the EOS that ends every row.
        pad_token: padding id (also ``'</s>'``'s).
        unk_token: id of ``'<unk>'``.
        sot_token: None (rows have no start token).
        context_length: default row length of :meth:`__call__` (64, SigLIP's).

    Instances are picklable (they pickle the file's content, so a data worker
    needs no access to the file) and safe to use from several threads.
    """

  sot_token = None

  def __init__(self, path: str | os.PathLike, context_length: int = SIGLIP_CONTEXT_LENGTH):
    """Read the tokenizer.

        Args:
            path: a SentencePiece model file (``spiece.model``), a Hugging Face
                ``tokenizer.json``, or a folder holding one of them
                (``spiece.model`` preferred).
            context_length: default number of ids per row, >= 1.

        Raises:
            ConfigError (a ValueError) naming the path when there is no such
            file, when it cannot be read, or when it lacks ``'</s>'`` or
            ``'<unk>'``.
        """
    self.context_length = check_context_length(context_length, minimum=1, room="the EOS")
    self.path = resolve_tokenizer_file(path)
    self._model = load_model(self.path)
    self.vocab_size: int = self._model.vocab_size
    self.eot_token: int = self._special_id(_EOS_TEXT)
    self.unk_token: int = self._special_id(_UNK_TEXT)
    self.pad_token: int = self._special_id(_PAD_TEXT)
    self._specials = {text: self._special_id(text) for text in (_EOS_TEXT, _UNK_TEXT, _PAD_TEXT)}
    # Longest first, as transformers' trie matches them.
    alternatives = "|".join(_stdlib_re.escape(t) for t in sorted(self._specials, key=len, reverse=True))
    self._special_re = _stdlib_re.compile(f"({alternatives})")

  def _special_id(self, text: str) -> int:
    i = self._model.piece_id(text)
    if i is None:
      raise ConfigError(f"{self.path!r} has no {text!r} token: SigLIP's tokenizer ends and pads every row with "
                        f"{_EOS_TEXT!r} and spells unknown text {_UNK_TEXT!r}")
    return i

  def __repr__(self) -> str:
    return (f"SentencePieceTokenizer(path={self.path!r}, vocab_size={self.vocab_size}, "
            f"context_length={self.context_length})")

  def _chunks(self, text: str) -> list[str]:
    """The text split around literal special tokens (empty pieces dropped)."""
    # SiglipTokenizer marks the start of the text with '▁'; a '▁' in the text is a space to it. (Its special tokens
    # also strip the whitespace beside them, which canonicalising each chunk does anyway.)
    return [c for c in self._special_re.split(_SPIECE_UNDERLINE + text.replace(_SPIECE_UNDERLINE, " ")) if c]

  def encode(self, text: str) -> list[int]:
    """Ids of one caption, without the EOS or padding.

        Args:
            text: one caption (raw: it is canonicalised here).

        Returns:
            list of ints of length ``n_tokens`` (0 for empty text).
        """
    if not isinstance(text, str):
      raise TypeError(f"encode expects a str, got {type(text).__name__}")
    ids: list[int] = []
    first_piece = None  # the piece of ids[0], when a text chunk gave it
    special_second = False  # ids[1] is a literal special token
    for chunk in self._chunks(text):
      special = self._specials.get(chunk)
      if special is not None:
        special_second = special_second or len(ids) == 1
        ids.append(special)
        continue
      pieces, chunk_ids = self._model.chunk(canonicalize_text(chunk))
      if not ids and pieces:
        first_piece = pieces[0]
      ids += chunk_ids
    # SiglipTokenizer.tokenize drops a lone start mark before a special token.
    if len(ids) > 1 and first_piece == _SPIECE_UNDERLINE and special_second:
      ids = ids[1:]
    return ids

  def decode(self, ids: Iterable[int] | np.ndarray) -> str:
    """Turn ids back into (canonical) text.

        Trailing padding is dropped, as are EOS and pad ids elsewhere.

        Args:
            ids: 1-D sequence/array of ints of shape ``[n]``, e.g. one row of
                :meth:`__call__` or the output of :meth:`encode`.

        Returns:
            The decoded string, stripped. For canonical text whose words are all
            in the vocabulary, ``decode(encode(t)) == t``.
        """
    kept = []
    for i in ids_before_padding(ids, self.pad_token):
      if not 0 <= i < self.vocab_size:
        raise ValueError(f"token id {i} outside [0, {self.vocab_size})")
      if i not in (self.eot_token, self.pad_token):
        kept.append(i)
    return self._model.decode(kept).strip()

  def __call__(self, texts: str | Sequence[str], context_length: int | None = None) -> np.ndarray:
    """Tokenize captions into fixed-length rows, as SigLIP's processor does.

        Each row is ``encode(text) + [EOS]`` right-padded with the pad id. If that
        is longer than ``context_length``, ``encode(text)`` is cut to
        ``context_length - 1`` ids before the EOS. (As transformers, no second EOS
        follows ids that already end with a literal ``'</s>'``.)

        Args:
            texts: one caption (``str``) or a sequence of N captions.
            context_length: row length L (>= 1); ``None`` uses
                ``self.context_length``.

        Returns:
            int32 array of shape ``[N, L]`` (``[1, L]`` for a single string).
        """
    texts = text_list(texts)
    length = (self.context_length if context_length is None
              else check_context_length(context_length, minimum=1, room="the EOS"))
    out = np.full((len(texts), length), self.pad_token, dtype=np.int32)
    eos = self.eot_token
    for row, text in enumerate(texts):
      ids = self.encode(text)
      if len(ids) + 1 > length:
        ids = ids[:length - 1]
      if not ids or ids[-1] != eos:
        ids.append(eos)
      out[row, :len(ids)] = ids
    return out
