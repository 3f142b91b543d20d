#!/usr/bin/env python
"""Throughput of vlp_jax.data.text.clip_bpe.Tokenizer on synthetic captions.

Prints one JSON object. "cold" uses a fresh Tokenizer (empty word cache) for
one pass over the captions; "warm" is a second pass with the same instance.
With --reference, also times open_clip's SimpleTokenizer (loaded from the file
open_clip/tokenizer.py, so torchvision is not needed) on the same captions.

Usage:
    python benchmarks/tokenizer_throughput.py [--captions 20000] [--batch 256] [--reference]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import random
import pathlib
import sys
import time

try:
  from vlp_jax.data.text.clip_bpe import Tokenizer
except ModuleNotFoundError:  # running from a checkout without an install
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
  from vlp_jax.data.text.clip_bpe import Tokenizer

COMMON = ("a an the of on in with and at by to from near under over two three several young old "
          "man woman child dog cat bird horse car bus train street table kitchen room beach "
          "mountain river tree grass snow water sky city building people group sitting standing "
          "walking running playing holding looking riding eating white black red blue green brown "
          "large small little big wooden open front next top side photo picture view close up").split()
SYLLABLES = "ka ri to mu ne sa lo vi de pra ston gel bur quin zor tha mel fi ux ob".split()
EXTRAS = ["caf\u00e9", "na\u00efve", "M\u00fcnchen", "\u6771\u4eac", "\U0001f600", "&amp;", "it's", "3.14", "2021"]


def synthetic_captions(n: int, seed: int = 0, extras: bool = True) -> list[str]:
  """~80% common words, ~17% rare made-up words, ~3% (if extras) non-ASCII or
    entity/number/contraction words; about 29% of captions then need ftfy."""
  rng = random.Random(seed)
  rare = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(5000)]
  caps = []
  for _ in range(n):
    words = []
    for _ in range(rng.randint(5, 30)):
      r = rng.random()
      if r < 0.80:
        w = rng.choice(COMMON)
      elif r < 0.97:
        w = rng.choice(rare)
      elif extras:
        w = rng.choice(EXTRAS)
      else:
        w = rng.choice(COMMON)
      if rng.random() < 0.1:
        w = w.capitalize()
      words.append(w)
    cap = " ".join(words)
    cap += rng.choice([".", "", "!", " ...", ","])
    caps.append(cap[0].upper() + cap[1:])
  return caps


def time_pass(fn, captions, batch):
  t0 = time.perf_counter()
  for i in range(0, len(captions), batch):
    fn(captions[i:i + batch])
  return time.perf_counter() - t0


def load_reference():
  spec = importlib.util.find_spec("open_clip")
  if spec is None or not spec.submodule_search_locations:
    raise SystemExit("--reference needs open_clip_torch installed")
  path = list(spec.submodule_search_locations)[0] + "/tokenizer.py"
  mod_spec = importlib.util.spec_from_file_location("_open_clip_tokenizer", path)
  mod = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(mod)
  return mod.SimpleTokenizer()


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--captions", type=int, default=20000)
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--reference", action="store_true")
  args = ap.parse_args()

  caps = synthetic_captions(args.captions)
  t0 = time.perf_counter()
  tok = Tokenizer()
  load_s = time.perf_counter() - t0

  cold = time_pass(tok, caps, args.batch)
  warm = time_pass(tok, caps, args.batch)
  n_tokens = sum(len(tok.encode(c)) for c in caps)

  ascii_caps = synthetic_captions(args.captions, extras=False)
  ascii_tok = Tokenizer()
  ascii_cold = time_pass(ascii_tok, ascii_caps, args.batch)
  ascii_warm = time_pass(ascii_tok, ascii_caps, args.batch)
  result = {
      "captions_per_sec": round(args.captions / warm, 1),
      "captions": args.captions,
      "batch": args.batch,
      "cold_captions_per_sec": round(args.captions / cold, 1),
      "warm_captions_per_sec": round(args.captions / warm, 1),
      "cold_s": round(cold, 4),
      "warm_s": round(warm, 4),
      "non_ascii_or_entity_fraction": round(sum(not c.isascii() or "&" in c for c in caps) / len(caps), 3),
      "ascii_only_cold_captions_per_sec": round(args.captions / ascii_cold, 1),
      "ascii_only_warm_captions_per_sec": round(args.captions / ascii_warm, 1),
      "mean_bpe_tokens_per_caption": round(n_tokens / args.captions, 2),
      "word_cache_entries": len(tok._word_cache),
      "tokenizer_load_s": round(load_s, 4),
      "python": platform.python_version(),
  }
  if args.reference:
    ref = load_reference()
    ref_cold = time_pass(lambda b: ref(b, context_length=77), caps, args.batch)
    ref_warm = time_pass(lambda b: ref(b, context_length=77), caps, args.batch)
    ref_ascii = time_pass(lambda b: ref(b, context_length=77), ascii_caps, args.batch)
    result["open_clip_ascii_only_warm_captions_per_sec"] = round(args.captions / ref_ascii, 1)
    result["open_clip_cold_captions_per_sec"] = round(args.captions / ref_cold, 1)
    result["open_clip_warm_captions_per_sec"] = round(args.captions / ref_warm, 1)
    result["speedup_warm_vs_open_clip"] = round(ref_warm / warm, 2)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
