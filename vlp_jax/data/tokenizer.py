"""CLIP byte-level BPE tokenizer (token-for-token compatible with OpenAI CLIP /
open_clip ``SimpleTokenizer``).

This is an independent implementation tuned for use inside data-loader workers:

* the pre-tokenisation regex is compiled once at import time;
* each pre-token (a "word" produced by the regex) is mapped to its BPE ids once
  and then served from a per-instance cache (a plain ``dict`` with a size cap);
* the byte -> unicode mapping is a precomputed ``str.translate`` table;
* text that is printable ASCII without ``&`` skips ``ftfy``/``html`` (both are
  provably the identity on such text, see :func:`clean_text`), and cleaned
  ASCII text is pre-tokenised with an equivalent stdlib ``re`` pattern.

Vocabulary layout (49408 ids): 256 byte symbols, the same 256 symbols with the
end-of-word suffix ``</w>``, 48894 merges, then ``<start_of_text>`` (49406) and
``<end_of_text>`` (49407). Padding uses id 0.

The vocabulary file ``assets/bpe_simple_vocab_16e6.txt.gz`` comes from OpenAI's
CLIP repository (MIT licence, see ``assets/LICENSE_CLIP_BPE.txt``).

:class:`SentencePieceTokenizer` is SigLIP's tokenizer (the text tower of
transformers' ``SiglipModel`` and open_clip's ``ViT-*-SigLIP``): it reads the
``spiece.model`` (or ``tokenizer.json``) shipped beside those weights and gives
the ids transformers' ``SiglipTokenizer`` gives. :func:`tokenizer_for` picks the
tokenizer a model config names (``config.model.text.tokenizer``).
"""

from __future__ import annotations

import functools
import gzip
import html
import importlib.resources
import io
import os
import re as _stdlib_re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ftfy
import numpy as np
import regex

from vlp_jax.errors import ConfigError
from vlp_jax.registry import check_choice

__all__ = ["Tokenizer", "default_tokenizer", "clean_text", "DEFAULT_CONTEXT_LENGTH", "SentencePieceTokenizer",
           "canonicalize_text", "tokenizer_for", "cached_tokenizer", "tokenizer_options", "require_clip_bpe",
           "TOKENIZERS", "GemmaSentencePieceTokenizer"]

DEFAULT_CONTEXT_LENGTH = 77
VOCAB_FILENAME = "bpe_simple_vocab_16e6.txt.gz"

SOT_TEXT = "<start_of_text>"
EOT_TEXT = "<end_of_text>"
_END_OF_WORD = "</w>"

# Number of merge rules used by CLIP: 49152 - 256 - 2 (lines 1..48894 of the file).
_NUM_MERGES = 49152 - 256 - 2

# Cap on the per-instance word cache; when reached the cache is reset. Caption
# corpora rarely exceed ~10^5 distinct pre-tokens, so this almost never fires.
_WORD_CACHE_MAX = 1 << 18

# Pre-tokenisation: special tokens, English contractions, letter runs, single
# digits, runs of other non-space symbols. Case-insensitive, compiled once.
_PRETOKEN_RE = regex.compile(
    r"<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+",
    regex.IGNORECASE,
)

# Same pre-tokenisation restricted to cleaned ASCII text (lowercase, the only
# whitespace left is ' '): there \p{L} is [a-z], \p{N} is [0-9] and \s is ' ',
# and the stdlib engine is about twice as fast as `regex` on it.
_ASCII_PRETOKEN_RE = _stdlib_re.compile(
    r"<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[a-z]+|[0-9]|[^ a-z0-9]+")

# Any character outside printable ASCII (+ \t \n \r), or '&'. Text with none of
# these is left unchanged by ftfy.fix_text and html.unescape.
_NEEDS_FULL_CLEAN_RE = _stdlib_re.compile(r"[^\t\n\r\x20-\x25\x27-\x7e]")


def _bytes_to_unicode() -> list[str]:
  """Return a 256-entry list mapping each byte value to a printable unicode char.

    Printable latin-1 bytes map to themselves; the remaining 68 bytes (controls,
    space, ...) map in increasing byte order to U+0100, U+0101, ...
    """
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
          *range(ord("\u00ae"), ord("\u00ff") + 1)]
  keep_set = set(keep)
  table = [""] * 256
  for b in keep:
    table[b] = chr(b)
  extra = 0
  for b in range(256):
    if b not in keep_set:
      table[b] = chr(256 + extra)
      extra += 1
  return table


_BYTE_TO_UNICODE: list[str] = _bytes_to_unicode()
# Order of the first 256 vocabulary entries (kept bytes first, then the others).
_BYTE_SYMBOL_ORDER: list[str] = sorted(_BYTE_TO_UNICODE, key=lambda ch: (ord(ch) >= 256, ord(ch)))
# str.translate table: latin-1 decoded byte (code point 0..255) -> byte symbol.
_BYTE_TRANSLATE = {b: ch for b, ch in enumerate(_BYTE_TO_UNICODE)}
_UNICODE_TO_BYTE = {ch: b for b, ch in enumerate(_BYTE_TO_UNICODE)}


def clean_text(text: str) -> str:
  """Normalise a caption exactly as CLIP does before BPE.

    Steps: ``ftfy.fix_text``; ``html.unescape`` twice; strip; collapse every
    run of (``str.split``) whitespace to one space; lowercase.

    Fast path: for text made only of printable ASCII, ``\\t``, ``\\n`` and
    ``\\r`` and containing no ``&``, ftfy and html.unescape cannot change
    anything that survives whitespace collapsing, so they are skipped.

    Args:
        text: a single caption.

    Returns:
        The cleaned, lowercased string (no leading/trailing whitespace).
    """
  if not isinstance(text, str):
    raise TypeError(f"clean_text expects a str, got {type(text).__name__}")
  if _NEEDS_FULL_CLEAN_RE.search(text) is not None:
    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text))
  return " ".join(text.split()).lower()


def _read_merges(vocab_path: str | os.PathLike | None) -> list[tuple[str, ...]]:
  if vocab_path is None:
    resource = importlib.resources.files(__package__).joinpath("assets", VOCAB_FILENAME)
    raw = resource.read_bytes()
    name = VOCAB_FILENAME
  else:
    with open(vocab_path, "rb") as f:
      raw = f.read()
    name = os.fspath(vocab_path)
  if raw[:2] == b"\x1f\x8b":
    raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read()
  lines = raw.decode("utf-8").split("\n")
  merges = [tuple(line.split()) for line in lines[1:_NUM_MERGES + 1]]
  if len(merges) != _NUM_MERGES or any(len(m) != 2 for m in merges):
    raise ValueError(f"{name!r} is not a CLIP BPE merges file: expected {_NUM_MERGES} merge "
                     "lines of two symbols after the header line")
  return merges


class Tokenizer:
  """CLIP BPE tokenizer producing fixed-length int32 id arrays.

    Attributes:
        vocab_size: 49408 for the shipped vocabulary.
        sot_token: id of ``<start_of_text>`` (49406).
        eot_token: id of ``<end_of_text>`` (49407).
        pad_token: padding id (0).
        context_length: default row length of :meth:`__call__` (77).

    Instances are picklable (the word cache is not pickled) and safe to use
    from several threads; each process keeps its own cache.
    """

  def __init__(self, vocab_path: str | None = None, context_length: int = DEFAULT_CONTEXT_LENGTH):
    """Load the BPE merges.

        Args:
            vocab_path: path to a CLIP merges file (gzip or plain text). ``None``
                uses the vocabulary shipped with the package.
            context_length: default number of ids per row, >= 2.
        """
    self.context_length = _check_context_length(context_length)
    self.vocab_path = None if vocab_path is None else os.fspath(vocab_path)

    merges = _read_merges(vocab_path)
    symbols = list(_BYTE_SYMBOL_ORDER)
    symbols += [s + _END_OF_WORD for s in _BYTE_SYMBOL_ORDER]
    symbols += ["".join(m) for m in merges]
    symbols += [SOT_TEXT, EOT_TEXT]
    self._encoder: dict[str, int] = dict(zip(symbols, range(len(symbols))))
    self._decoder: list[str] = symbols
    self._bpe_ranks: dict[tuple[str, ...], int] = dict(zip(merges, range(len(merges))))

    self.vocab_size: int = len(symbols)
    self.sot_token: int = self._encoder[SOT_TEXT]
    self.eot_token: int = self._encoder[EOT_TEXT]
    self.pad_token: int = 0
    self._specials = frozenset((self.sot_token, self.eot_token))
    self._word_cache: dict[str, tuple[int, ...]] = {}
    self._reset_cache()

  def vocabulary(self) -> tuple[list[str], list[tuple[str, str]]]:
    """(the symbol of each id, in id order; the BPE merges, in rank order): what another library's files for this
    tokenizer (transformers' vocab.json and merges.txt) are written from."""
    return list(self._decoder), sorted(self._bpe_ranks, key=self._bpe_ranks.get)

  # ------------------------------------------------------------------ state
  def _reset_cache(self) -> None:
    self._word_cache.clear()
    self._word_cache[SOT_TEXT] = (self.sot_token,)
    self._word_cache[EOT_TEXT] = (self.eot_token,)

  def __getstate__(self):
    state = self.__dict__.copy()
    state["_word_cache"] = {}
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._reset_cache()

  def __repr__(self) -> str:
    return (f"Tokenizer(vocab_size={self.vocab_size}, context_length={self.context_length}, "
            f"vocab_path={self.vocab_path!r})")

  # -------------------------------------------------------------------- BPE
  def _bpe_word(self, word: str) -> tuple[int, ...]:
    """BPE ids of one pre-token (uncached). ``word`` is raw (not byte-mapped)."""
    chars = word.encode("utf-8").decode("latin-1").translate(_BYTE_TRANSLATE)
    encoder = self._encoder
    if len(chars) == 1:
      return (encoder[chars + _END_OF_WORD],)
    symbols = list(chars[:-1])
    symbols.append(chars[-1] + _END_OF_WORD)
    ranks = self._bpe_ranks
    while len(symbols) > 1:
      # Lowest-ranked adjacent pair that has a merge rule.
      best_rank = None
      first = second = ""
      for a, b in zip(symbols, symbols[1:]):
        r = ranks.get((a, b))
        if r is not None and (best_rank is None or r < best_rank):
          best_rank, first, second = r, a, b
      if best_rank is None:
        break
      # Merge every non-overlapping occurrence, scanning left to right.
      merged = first + second
      out: list[str] = []
      i, n = 0, len(symbols)
      while i < n:
        if i + 1 < n and symbols[i] == first and symbols[i + 1] == second:
          out.append(merged)
          i += 2
        else:
          out.append(symbols[i])
          i += 1
      symbols = out
    return tuple(encoder[s] for s in symbols)

  def _word_ids(self, word: str) -> tuple[int, ...]:
    ids = self._bpe_word(word)
    cache = self._word_cache
    if len(cache) >= _WORD_CACHE_MAX:
      self._reset_cache()
    cache[word] = ids
    return ids

  # -------------------------------------------------------------------- API
  def encode(self, text: str) -> list[int]:
    """BPE ids of ``clean_text(text)``, without SOT/EOT or padding.

        Args:
            text: one caption.

        Returns:
            list of ints of length ``n_tokens`` (0 for empty/whitespace text).
        """
    if not isinstance(text, str):
      raise TypeError(f"encode expects a str, got {type(text).__name__}")
    text = clean_text(text)
    pretoken_re = _ASCII_PRETOKEN_RE if text.isascii() else _PRETOKEN_RE
    cache = self._word_cache
    ids: list[int] = []
    for word in pretoken_re.findall(text):
      w = cache.get(word)
      if w is None:
        w = self._word_ids(word)
      ids += w
    return ids

  def decode(self, ids: Iterable[int] | np.ndarray) -> str:
    """Turn ids back into text.

        SOT/EOT ids are dropped, as is trailing padding (id 0 at the end of the
        sequence). Id 0 elsewhere is kept, since it is also the BPE symbol
        ``!``. End-of-word markers become spaces; the result is stripped.

        Args:
            ids: 1-D sequence/array of ints of shape ``[n]``, e.g. one row of
                :meth:`__call__` or the output of :meth:`encode`.

        Returns:
            The decoded string. For lowercase text of letters separated by
            single spaces, ``decode(encode(t)) == t``.
        """
    decoder = self._decoder
    pieces = []
    for i in _ids_before_padding(ids, self.pad_token):
      if i in self._specials:
        continue
      if not 0 <= i < self.vocab_size:
        raise ValueError(f"token id {i} outside [0, {self.vocab_size})")
      pieces.append(decoder[i])
    raw = bytes(_UNICODE_TO_BYTE[c] for c in "".join(pieces))
    return raw.decode("utf-8", errors="replace").replace(_END_OF_WORD, " ").strip()

  def __call__(self, texts: str | Sequence[str], context_length: int | None = None) -> np.ndarray:
    """Tokenize captions into fixed-length rows.

        Each row is ``[SOT] + encode(text) + [EOT]`` right-padded with 0. If that
        is longer than ``context_length`` it is cut to ``context_length`` ids and
        the last id is replaced by EOT.

        Args:
            texts: one caption (``str``) or a sequence of N captions.
            context_length: row length L (>= 2); ``None`` uses
                ``self.context_length``.

        Returns:
            int32 array of shape ``[N, L]`` (``[1, L]`` for a single string).
        """
    texts = _text_list(texts)
    length = self.context_length if context_length is None else _check_context_length(context_length)

    out = np.zeros((len(texts), length), dtype=np.int32)
    sot, eot = self.sot_token, self.eot_token
    limit = length - 2  # BPE ids that fit between SOT and EOT
    for row, text in enumerate(texts):
      ids = self.encode(text)
      if len(ids) > limit:
        ids = ids[:length - 1]
        ids[-1] = eot
        out[row, 0] = sot
        out[row, 1:] = ids
      else:
        ids.insert(0, sot)
        ids.append(eot)
        out[row, :len(ids)] = ids
    return out


def _ids_before_padding(ids: Iterable[int] | np.ndarray, pad_token: int) -> list[int]:
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


def _text_list(texts: str | Sequence[str]) -> list[str]:
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


def _check_context_length(context_length, minimum: int = 2, room: str = "SOT and EOT") -> int:
  if isinstance(context_length, bool) or not isinstance(context_length, (int, np.integer)):
    raise TypeError(f"context_length must be an int, got {type(context_length).__name__}")
  if context_length < minimum:
    raise ValueError(f"context_length must be >= {minimum} (room for {room}), got {context_length}")
  return int(context_length)


@functools.lru_cache(maxsize=None)
def default_tokenizer() -> Tokenizer:
  """Process-wide singleton :class:`Tokenizer` with the shipped vocabulary and
    context length 77."""
  return Tokenizer()


# ----------------------------------------------------------------- SigLIP's SentencePiece tokenizer

CLIP_BPE = "clip_bpe"
SENTENCEPIECE = "sentencepiece"
GEMMA = "gemma"  # SigLIP 2's tokenizer (GemmaSentencePieceTokenizer)
TOKENIZERS = (CLIP_BPE, SENTENCEPIECE, GEMMA)  # the values of config.model.text.tokenizer

SIGLIP_CONTEXT_LENGTH = 64  # SiglipTokenizer's model_max_length
SPIECE_FILENAME = "spiece.model"
TOKENIZER_JSON_FILENAME = "tokenizer.json"
# What a tokenizer folder is searched for, in order of preference.
TOKENIZER_FILENAMES = (SPIECE_FILENAME, TOKENIZER_JSON_FILENAME)
GEMMA_FILENAME = "tokenizer.model"  # transformers' name for Gemma's SentencePiece model (SigLIP 2's folders)

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


def _load_model(path: str) -> _SentencePieceModel | _TokenizersModel:
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
    self.context_length = _check_context_length(context_length, minimum=1, room="the EOS")
    self.path = resolve_tokenizer_file(path)
    self._model = _load_model(self.path)
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
    for i in _ids_before_padding(ids, self.pad_token):
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
    texts = _text_list(texts)
    length = (self.context_length if context_length is None
              else _check_context_length(context_length, minimum=1, room="the EOS"))
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
    self.context_length = _check_context_length(context_length, minimum=1, room="the EOS")
    path = os.fspath(path)
    self.path = os.path.join(path, GEMMA_FILENAME) if os.path.isdir(path) else path
    if not os.path.isfile(self.path) or self.path.endswith(".json"):
      raise ConfigError(f"no Gemma SentencePiece model at {self.path!r}: expected the {GEMMA_FILENAME} that came with "
                        "the SigLIP 2 weights (a tokenizer.json is not read for Gemma), or a folder holding it")
    self._model = _load_model(self.path)
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
