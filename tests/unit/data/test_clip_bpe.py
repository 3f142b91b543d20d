"""Tests for the CLIP BPE tokenizer (vlp_jax.data.text.clip_bpe).

The golden ids in tests/data/tokenizer_golden.json were produced by open_clip's
SimpleTokenizer (see tools/make_tokenizer_golden.py); open_clip is not needed here.
"""

from __future__ import annotations

import gzip
import html
import importlib.resources
import json
import pathlib
import pickle
import random

import ftfy
import numpy as np
import pytest

from support import TEST_DATA
from vlp_jax.data.text import clip_bpe as m
from vlp_jax.data.text.clip_bpe import Tokenizer, clean_text, default_tokenizer

GOLDEN_PATH = pathlib.Path(TEST_DATA) / "tokenizer_golden.json"
GOLDEN = json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))
CASES = GOLDEN["cases"]
LONG_CASES = [c for c in CASES if c["ids"][-1] == 49407]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
  return default_tokenizer()


def test_golden_file_sane():
  assert "open_clip" in GOLDEN["source"]
  assert len(CASES) >= 40
  assert all(len(c["ids"]) == 77 for c in CASES)
  assert len(LONG_CASES) >= 3


def test_constants(tok):
  assert tok.vocab_size == 49408
  assert tok.sot_token == 49406
  assert tok.eot_token == 49407
  assert tok.pad_token == 0
  assert tok.context_length == 77


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_matches_open_clip_golden(tok, case):
  out = tok(case["text"])
  assert out.shape == (1, 77)
  assert out.dtype == np.int32
  assert out[0].tolist() == case["ids"], repr(case["text"])


def test_golden_batch(tok):
  out = tok([c["text"] for c in CASES])
  assert out.shape == (len(CASES), 77)
  np.testing.assert_array_equal(out, np.array([c["ids"] for c in CASES], dtype=np.int32))


@pytest.mark.parametrize("text", ["", "   ", "\t\n \r\n"])
def test_empty_text(tok, text):
  out = tok(text)
  assert out.shape == (1, 77)
  assert out[0, :2].tolist() == [49406, 49407]
  assert not out[0, 2:].any()
  assert tok.encode(text) == []


def test_known_ids(tok):
  assert tok.encode("a photo of a cat") == [320, 1125, 539, 320, 2368]


def test_truncation(tok):
  for case in LONG_CASES:
    text = case["text"]
    full = tok.encode(text)
    row = tok(text)[0]
    assert row[76] == tok.eot_token
    if len(full) + 2 > 77:
      untruncated = [tok.sot_token] + full + [tok.eot_token]
      assert row[:76].tolist() == untruncated[:76]
      assert tok.eot_token not in full[:75]


def test_exact_fit_boundary(tok):
  fits = tok("a " * 75)[0]  # 75 BPE ids + SOT + EOT == 77
  assert fits.tolist() == [49406] + [320] * 75 + [49407]
  over = tok("a " * 76)[0]
  assert over.tolist() == [49406] + [320] * 75 + [49407]
  assert tok.encode("a " * 76) == [320] * 76


def test_custom_context_length(tok):
  text = CASES[2]["text"]
  full = tok.encode(text)
  short = tok(text, context_length=8)
  assert short.shape == (1, 8)
  assert short[0].tolist() == [tok.sot_token] + full[:6] + [tok.eot_token]
  long = tok([text, ""], context_length=200)
  assert long.shape == (2, 200)
  assert long[0, :len(full) + 2].tolist() == [tok.sot_token] + full + [tok.eot_token]
  assert not long[0, len(full) + 2:].any()
  assert tok(text, context_length=2)[0].tolist() == [tok.sot_token, tok.eot_token]
  # the instance default is used when context_length is None
  t16 = Tokenizer(context_length=16)
  assert t16.context_length == 16
  assert t16(text).shape == (1, 16)
  np.testing.assert_array_equal(t16(text), tok(text, context_length=16))


def test_custom_vocab_path(tmp_path, tok):
  raw = importlib.resources.files("vlp_jax.data.text").joinpath("assets", "bpe_simple_vocab_16e6.txt.gz").read_bytes()
  plain = tmp_path / "vocab.txt"
  plain.write_bytes(gzip.decompress(raw))
  t = Tokenizer(str(plain))
  assert t.vocab_size == 49408
  np.testing.assert_array_equal(t(CASES[1]["text"]), tok(CASES[1]["text"]))


@pytest.mark.parametrize(
    "text",
    ["a photo of a cat", "two dogs playing in the snow", "supercalifragilisticexpialidocious fox", "x"],
)
def test_encode_decode_roundtrip(tok, text):
  assert tok.decode(tok.encode(text)) == text
  assert tok.decode(tok(text)[0]) == text  # drops SOT, EOT and padding


def test_decode_keeps_inner_id_zero(tok):
  # id 0 is both the pad id and the BPE symbol "!" (no end-of-word marker);
  # only trailing zeros are treated as padding.
  ids = tok.encode("wow !~")
  assert ids[-2:] == [0, 349]  # "!" then "~</w>"
  assert tok.decode(ids) == "wow !~"
  assert tok.decode(tok("wow !~")[0]) == "wow !~"


def test_deterministic(tok):
  texts = [c["text"] for c in CASES]
  a = tok(texts)
  b = tok(texts)
  c = Tokenizer()(texts)  # fresh instance, cold cache
  np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(a, c)


def test_pickle_roundtrip(tok):
  t2 = pickle.loads(pickle.dumps(tok))
  texts = [c["text"] for c in CASES]
  np.testing.assert_array_equal(t2(texts), tok(texts))


def test_default_tokenizer_is_singleton():
  assert default_tokenizer() is default_tokenizer()


def test_accepts_sequences(tok):
  texts = ("a cat", "a dog")
  np.testing.assert_array_equal(tok(texts), tok(list(texts)))
  assert tok([]).shape == (0, 77)
  np.testing.assert_array_equal(tok(np.array(["a cat", "a dog"])), tok(list(texts)))


@pytest.mark.parametrize("bad", [["ok", 3], ["ok", None], [b"bytes"]])
def test_non_str_items_raise(tok, bad):
  with pytest.raises(TypeError, match="expected str"):
    tok(bad)


@pytest.mark.parametrize("bad", [b"bytes", 5, None])
def test_non_text_input_raises(tok, bad):
  with pytest.raises(TypeError):
    tok(bad)
  with pytest.raises(TypeError):
    tok.encode(bad)


@pytest.mark.parametrize("n", [0, 1, -5])
def test_bad_context_length(tok, n):
  with pytest.raises(ValueError, match="context_length"):
    tok("a cat", context_length=n)
  with pytest.raises(ValueError, match="context_length"):
    Tokenizer(context_length=n)


def test_non_int_context_length(tok):
  with pytest.raises(TypeError, match="context_length"):
    tok("a cat", context_length=7.5)


def test_decode_bad_ids(tok):
  with pytest.raises(ValueError):
    tok.decode([1, 2, 10**6])
  with pytest.raises(ValueError):
    tok.decode(np.zeros((2, 3), dtype=np.int32))


def test_bad_vocab_file(tmp_path):
  p = tmp_path / "vocab.txt"
  p.write_text("#version\ni n\n")
  with pytest.raises(ValueError, match="merges"):
    Tokenizer(str(p))


def _reference_clean(text: str) -> str:
  text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
  return " ".join(text.split()).strip().lower()


def test_clean_text_fast_path_matches_full_pipeline():
  rng = random.Random(1234)
  alphabet = [chr(c) for c in range(32, 127)] + ["\t", "\n", "\r", "\r\n", "  "]
  for _ in range(3000):
    s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 50)))
    assert clean_text(s) == _reference_clean(s), repr(s)
  for case in CASES:
    assert clean_text(case["text"]) == _reference_clean(case["text"])


def test_ascii_pretokenizer_matches_unicode_pattern():
  rng = random.Random(99)
  alphabet = [chr(c) for c in range(128)] + ["'s", "'LL", "<start_of_text>", "&amp;"]
  for _ in range(3000):
    s = clean_text("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))))
    if s.isascii():
      assert m._ASCII_PRETOKEN_RE.findall(s) == m._PRETOKEN_RE.findall(s), repr(s)


def test_clean_text_examples():
  assert clean_text("  Tom &amp; JERRY\t\n") == "tom & jerry"
  assert clean_text("caf\u00c3\u00a9") == "caf\u00e9"
  assert clean_text("") == ""
