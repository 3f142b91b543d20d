#!/usr/bin/env python
"""Regenerate tests/data/tokenizer_golden.json from open_clip's SimpleTokenizer.

Dev-only: not imported by the package or the tests. Needs, in a throwaway
environment (torchvision is NOT needed and should not be installed):

    pip install torch  # any CPU build
    pip install --no-deps open_clip_torch
    pip install ftfy regex numpy

``import open_clip`` pulls in torchvision, so this script loads only the file
``open_clip/tokenizer.py`` from site-packages via importlib.

Usage:
    python tools/make_tokenizer_golden.py [--out tests/data/tokenizer_golden.json]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "tokenizer_golden.json"

LONG_1 = " ".join(["The quick brown fox jumps over the lazy dog."] * 12)
LONG_2 = ("A crowded farmers market on a sunny Saturday morning, with wooden stalls piled high "
          "with heirloom tomatoes, purple carrots, bundles of fresh basil and rosemary, wheels of "
          "aged cheese, jars of wildflower honey and loaves of sourdough bread; shoppers carrying "
          "woven baskets chat with vendors under striped canvas awnings while a street musician "
          "plays an accordion near the fountain, children chase pigeons across the cobblestones, "
          "and in the background the old clock tower shows a quarter past nine as the light "
          "filters through the plane trees lining the square. Later that afternoon, the same "
          "square is almost empty: a single cyclist in a yellow raincoat pedals past closed "
          "shutters, puddles reflect the grey sky, and a black cat sleeps on a cafe chair.")
LONG_3 = ("Käsespätzle & Brötchen — 東京の夜景 🌃🌃 “quoted” text, it's 3.14159 × 2 = 6.28318!!! " * 8)

CASES: list[str] = [
    # plain captions / case
    "a photo of a cat",
    "A Photo Of A CAT on the MAT.",
    "Two dogs playing in the snow, one is brown and the other is white.",
    "ALL CAPS SENTENCE WITH NUMBERS 42",
    "snake_case and camelCase and kebab-case",
    "supercalifragilisticexpialidocious antidisestablishmentarianism "
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    # unicode
    "caf\u00e9 au lait",
    "cafe\u0301 au lait",  # combining acute accent (NFC by ftfy)
    "caf\u00c3\u00a9 au lait",  # mojibake "cafÃ©"
    "Mojibake: \u00e2\u20ac\u0153quoted\u00e2\u20ac\x9d and don\u00e2\u20ac\u2122t",
    "Die Stra\u00dfe in M\u00fcnchen ist gro\u00df",
    "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \u03ba\u03b1\u03b9 \u039f\u03b4\u03c5\u03c3\u03c3\u03ad\u03b1\u03c2",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u6771\u4eac\u30bf\u30ef\u30fc\u306e\u591c\u666f",
    "\u4e00\u53ea\u732b\u5750\u5728\u57ab\u5b50\u4e0a",
    "\ud55c\uad6d\uc5b4 \ucea1\uc158",
    "\u00dcn\u00efc\u00f6d\u00e9 \u00c0\u00c9\u00ce\u00d5\u00dc \u00f1and\u00fa \u00e7\u00e0",
    "\u00d1o\u00f1o's pi\u00f1ata",
    "\u0130stanbul",  # Turkish dotted capital I
    "I love pizza \U0001f355\U0001f355 and \U0001f431\u200d\U0001f464 ninjas",
    "thumbs up \U0001f44d\U0001f3fd",
    "\U0001f1fa\U0001f1f8 flags \U0001f1ef\U0001f1f5",
    "emoji only \U0001f600\U0001f603\U0001f604\U0001f601",
    "x\u00b2 + y\u00b3 = z\u00bd and \u2460\u2461\u2462 and \u216b",
    "\u201cCurly quotes\u201d and \u2018apostrophes\u2019 \u2014 em dash \u2026 ellipsis",
    "\ufb01ne \ufb02owers",  # latin ligatures
    "\uff2c\uff2f\uff35\uff24\u3000\uff2e\uff2f\uff29\uff33\uff25\uff33",  # fullwidth
    "zero\u200bwidth\u200djoiner and soft\u00adhyphen",
    "non\u00a0breaking\u00a0spaces and ideographic\u3000space",
    "control\x00chars\x07here \x1b[31mred\x1b[0m",
    # HTML entities
    "Tom &amp; Jerry",
    "&lt;b&gt;bold&lt;/b&gt; text",
    "&amp;amp;lt; triple escaped",
    "&quot;quoted&quot; and &#39;single&#39; &#x263A;",
    "<b>real tags</b> &amp; entity",
    # punctuation, contractions, numbers
    "wow!!! really?!?! ... --- *** !",
    "it's a dog's life, isn't it",
    "they'LL say WE'VE I'M YOU'RE SHE'D",
    "1234 apples cost $3.14 (about 20%)",
    "call 555-0199 or +1 (800) 123-4567 on 2023-01-31",
    "numbers: 0.5 1,000,000 1e-9 \u215e",
    "emails like someone@example.com and urls https://example.org/a_b?c=d&e=f",
    "<start_of_text> literal special tokens <end_of_text>",
    "<START_OF_TEXT>upper<END_OF_TEXT>",
    # whitespace
    "tabs\tand\nnewlines\r\nand   multiple    spaces",
    "  leading and trailing spaces  ",
    "",
    "     ",
    "\t\n \r\n",
    # length boundaries and long captions
    "a " * 75,  # exactly fills 77 slots
    "a " * 76,  # one token too many
    LONG_1,
    LONG_2,
    LONG_3,
]


def load_open_clip_tokenizer_module():
  spec = importlib.util.find_spec("open_clip")
  if spec is None or not spec.submodule_search_locations:
    sys.exit("open_clip_torch is not installed (pip install --no-deps open_clip_torch)")
  path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.py"
  mod_spec = importlib.util.spec_from_file_location("_open_clip_tokenizer", path)
  module = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(module)
  return module


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
  args = parser.parse_args()

  tok = load_open_clip_tokenizer_module()
  version = importlib.metadata.version("open_clip_torch")
  ids = tok.tokenize(CASES, context_length=77).tolist()

  lines = [
      "{",
      f'  "source": {json.dumps(f"open_clip_torch {version} SimpleTokenizer")},',
      f'  "ftfy_version": {json.dumps(importlib.metadata.version("ftfy"))},',
      f'  "regex_version": {json.dumps(importlib.metadata.version("regex"))},',
      '  "context_length": 77,',
      '  "cases": [',
  ]
  for i, (text, row) in enumerate(zip(CASES, ids)):
    sep = "," if i + 1 < len(CASES) else ""
    lines.append(f'    {{"text": {json.dumps(text, ensure_ascii=False)}, '
                 f'"ids": {json.dumps(row, separators=(",", ":"))}}}{sep}')
  lines += ["  ]", "}", ""]
  args.out.parent.mkdir(parents=True, exist_ok=True)
  args.out.write_text("\n".join(lines), encoding="utf-8")
  print(f"wrote {len(CASES)} cases to {args.out} ({version})")


if __name__ == "__main__":
  main()
