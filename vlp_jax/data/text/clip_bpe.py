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

The other tokenizers are siglip_sentencepiece.py and gemma_sentencepiece.py; tokenizer_factory.py picks the one a
model config names (``config.model.text.tokenizer``).
"""

from __future__ import annotations

import functools
import gzip
import html
import importlib.resources
import io
import os
import re as _stdlib_re
from collections.abc import Iterable, Sequence

import ftfy
import numpy as np
import regex

from vlp_jax.data.text.tokenizer_common import check_context_length, ids_before_padding, text_list

__all__ = ["Tokenizer", "default_tokenizer", "clean_text", "DEFAULT_CONTEXT_LENGTH"]

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
    self.context_length = check_context_length(context_length)
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
    for i in ids_before_padding(ids, self.pad_token):
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
    texts = text_list(texts)
    length = self.context_length if context_length is None else check_context_length(context_length)

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


@functools.lru_cache(maxsize=None)
def default_tokenizer() -> Tokenizer:
  """Process-wide singleton :class:`Tokenizer` with the shipped vocabulary and
    context length 77."""
  return Tokenizer()
