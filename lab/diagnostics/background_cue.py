#!/usr/bin/env python
"""How much a trained image tower encodes the background of the embedded scenes.

python lab/diagnostics/background_cue.py --runs=clip=/tmp/m/clip/seed0,slip=/tmp/m/slip/seed0 [--examples=500]

For each run (a label and a workdir or checkpoint), every image of the embedded test split's web and studio sources
is embedded as it is and with its background replaced by another of its own source (the record's class mask finds
the background; the new one is drawn by the dataset's renderer, once per image and shared by every run). The printed
figure is

  background shift = mean_i (1 - cos(f(x_i), f(x_i with a new background)))
                     / mean_i (1 - cos(f(x_i), f(x_j(i))))

with j(i) another test image of the same source (a fixed permutation): 0 when the features ignore the background,
1 when a new background moves them as far as a different scene does. It is given for the joint embedding ('embed',
what zero-shot and retrieval read) and for the tower's class token ('cls', what SLIP's SimCLR head and the linear
probe read). The web scenes draw a random gradient per image, an instance cue; the studio scenes one of four flat
colours (a quarter of the new ones are the old colour); the sketch scenes all share one grid, so they are left out.
the results archive (2026-11-25, part 9: `git show e9560bf:benchmarks/RESULTS_ARCHIVE.md`) reads it for SLIP.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags, logging  # noqa: E402
from vlp_jax.checkpoint_files import resolve_checkpoint  # noqa: E402
from vlp_jax.data.image import image_ops, transforms  # noqa: E402
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.inference import encoder_for_checkpoint  # noqa: E402

FLAGS = flags.FLAGS


def background_shift(original: np.ndarray, swapped: np.ndarray, seed: int = 0) -> float:
  """original, swapped: [N, d] features of N images and of the same images on new backgrounds (N >= 2) -> the
  background shift of the module docstring (cosine distances, so the features' norms do not matter)."""
  if original.shape != swapped.shape or original.ndim != 2 or len(original) < 2:
    raise ValueError(f'need two [N, d] feature arrays of one shape with N >= 2, got {original.shape} and '
                     f'{swapped.shape}')
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
  a, b = unit(original.astype(np.float64)), unit(swapped.astype(np.float64))
  n = len(a)
  other = (np.arange(n) + np.random.default_rng(seed).integers(1, n, size=n)) % n  # never the image itself
  moved = 1.0 - np.sum(a * b, axis=1).mean()
  apart = 1.0 - np.sum(a * a[other], axis=1).mean()
  return float(moved / apart)


def parse_runs(text: str) -> list[tuple[str, str]]:
  """'label=path,label=path' -> [(label, path)]."""
  runs = []
  for item in filter(None, text.split(',')):
    label, sep, path = item.partition('=')
    if not sep or not label or not path:
      raise ValueError(f"--runs has '{item}'; write each run as LABEL=WORKDIR")
    runs.append((label, path))
  if not runs:
    raise ValueError('--runs is empty; write LABEL=WORKDIR[,LABEL=WORKDIR...]')
  return runs


SOURCES = ('web', 'studio')  # the sources whose backgrounds vary


def test_images(source: str, count: int, image_size: int) -> tuple[np.ndarray, np.ndarray]:
  """The first `count` test images of one embedded source, as they are and on new backgrounds of that source: two
  [N, S, S, 3] uint8 arrays."""
  root = synthetic.ensure_dataset(synthetic.SyntheticSpec())
  examples = pipeline.read_all(synthetic.shard_paths(root, 'test', (source,)))[:count]
  originals, swapped = [], []
  for index, example in enumerate(examples):
    image, mask = records.decode_image(example['image']), records.decode_mask(example['mask'])
    background, _, _ = synthetic.render([], source, image.shape[0], np.random.default_rng([index, 17]))
    new = transforms.replace_background(image, mask, background)
    originals.append(image_ops.resize_image(image, image_size))
    swapped.append(image_ops.resize_image(new, image_size))
  return np.stack(originals), np.stack(swapped)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  runs = parse_runs(FLAGS.runs)
  header = ['run'] + [f'{source} {space}' for source in SOURCES for space in ('embed', 'cls')]
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  print(lines[0], flush=True)
  images: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
  for label, path in runs:
    config, encoder = encoder_for_checkpoint(resolve_checkpoint(path))
    size = config.model.vision.image_size
    if size not in images:
      images[size] = {source: test_images(source, FLAGS.examples, size) for source in SOURCES}
    row = [label]
    for source in SOURCES:
      original, swapped = (image_ops.normalize_image(x) for x in images[size][source])
      for features in (encoder.images, encoder.image_features):
        row.append(f'{background_shift(features(original), features(swapped)):.3f}')
    lines.append('| ' + ' | '.join(row) + ' |')
    print(lines[-1], flush=True)
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
  flags.DEFINE_string('runs', None, 'LABEL=WORKDIR[,LABEL=WORKDIR...]: the trained runs to measure.')
  flags.DEFINE_integer('examples', 500, 'Test images per source (the split has 500).')
  flags.DEFINE_string('output', '', 'Also write the table (markdown) to this file.')
  flags.mark_flag_as_required('runs')
  app.run(main)
