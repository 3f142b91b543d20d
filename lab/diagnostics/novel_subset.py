#!/usr/bin/env python
"""The size of the embedded dataset's novel subset (eval sets `synthetic_novel`, `synthetic_long_novel`) and how much
of the held-out split repeats the train split, for a config's dataset.

python lab/diagnostics/novel_subset.py [--config=configs/clip_shapes.py] [--config.eval.split=val]

Prints one JSON line: the split, its examples over the configured sources, how many are novel (neither the exact
short caption nor the scene layout of any train example: evalsets/synthetic.py `novel_subset`), the fractions whose
caption / layout repeats a train example's, and the dataset's digest. docs/evidence.md quotes it for the default.
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from absl import app  # noqa: E402
from ml_collections import config_flags  # noqa: E402
from vlp_jax.data.sources import synthetic_shapes as synthetic  # noqa: E402
from vlp_jax.evalsets.synthetic import novel_subset  # noqa: E402

CONFIG = config_flags.DEFINE_config_file('config', os.path.join(ROOT, 'configs', 'clip_shapes.py'),
                                         'A config whose config.data.synthetic names the dataset; config.eval.split '
                                         'the held-out split.')


def main(argv):
  del argv
  config = CONFIG.value
  spec = synthetic.spec_from_config(config.data)
  subset = novel_subset(spec, config.eval.split, config.data.cache_dir or None)
  print(json.dumps({'split': config.eval.split, 'examples': subset.total, 'novel': len(subset.keys),
                    'caption_seen': round(subset.caption_seen, 4), 'layout_seen': round(subset.layout_seen, 4),
                    'digest': spec.digest()}))


if __name__ == '__main__':
  app.run(main)
