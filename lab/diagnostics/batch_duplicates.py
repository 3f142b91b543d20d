#!/usr/bin/env python
"""How many rows of a training batch share their caption with another row (a false negative for InfoNCE), for
mixed batches and for ZeroVL's single-source batches of the embedded dataset.

python lab/diagnostics/batch_duplicates.py [--batch_size=128] [--batches=300] [--seed=0] [--captions=alt_text|detailed]

Prints one JSON line: distinct captions per source, and the mean fraction of a batch's rows whose caption appears
more than once in it, for random mixed batches, for single-source batches (a source drawn in proportion to size,
as config.data.mixing='single_source' does) and per source. the results archive (2026-11-25, part 8) reads it for the ZeroVL ablation.
"""
from __future__ import annotations

import collections
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402
from vlp_jax.data.loading import pipeline  # noqa: E402
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.sources.synthetic_shapes import CAPTION_STYLES  # noqa: E402

FLAGS = flags.FLAGS


def duplicated_fraction(captions: list[str]) -> float:
  """The fraction of rows whose caption occurs more than once among `captions` (one batch)."""
  counts = collections.Counter(captions)
  return sum(n for n in counts.values() if n > 1) / len(captions)


def batch_duplicates(captions_by_source: dict[str, list[str]], batch_size: int, batches: int, seed: int) -> dict:
  """{'mixed', 'single_source', 'per_source': {source: ...}}: mean `duplicated_fraction` over `batches` random
  batches of `batch_size`, drawn without replacement from all sources or from one."""
  rng = np.random.default_rng(seed)
  sources = list(captions_by_source)
  pooled = [c for s in sources for c in captions_by_source[s]]
  sizes = np.array([len(captions_by_source[s]) for s in sources], np.float64)

  def draw(pool: list[str]) -> float:
    return duplicated_fraction([pool[i] for i in rng.choice(len(pool), batch_size, replace=False)])

  mixed = [draw(pooled) for _ in range(batches)]
  single = [draw(captions_by_source[sources[rng.choice(len(sources), p=sizes / sizes.sum())]])
            for _ in range(batches)]
  per_source = {s: float(np.mean([draw(captions_by_source[s]) for _ in range(batches)])) for s in sources}
  return {'mixed': float(np.mean(mixed)), 'single_source': float(np.mean(single)), 'per_source': per_source}


def main(argv):
  del argv
  root = synthetic.ensure_dataset(synthetic.SyntheticSpec(captions=FLAGS.captions))
  captions = {s: [e['caption'] for e in pipeline.read_all(synthetic.shard_paths(root, 'train', (s,)))]
              for s in synthetic.SOURCES}
  result = batch_duplicates(captions, FLAGS.batch_size, FLAGS.batches, FLAGS.seed)
  result['distinct_captions'] = {s: len(set(c)) for s, c in captions.items()}
  result['train_examples'] = {s: len(c) for s, c in captions.items()}
  print(json.dumps(result))


if __name__ == '__main__':
  flags.DEFINE_integer('batch_size', 128, 'Rows per batch (the *_shapes.py configs use 128).')
  flags.DEFINE_integer('batches', 300, 'Random batches averaged.')
  flags.DEFINE_integer('seed', 0, 'Seed of the batch draws.')
  flags.DEFINE_enum('captions', 'alt_text', list(CAPTION_STYLES), "The embedded dataset's caption style "
                    '(config.data.synthetic.captions).')
  app.run(main)
