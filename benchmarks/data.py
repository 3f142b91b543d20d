#!/usr/bin/env python
"""Input pipeline throughput: samples per second per core, from 256px JPEG shards to model-ready batches, for
ArrayRecord shards and for the same images in webdataset tar shards read as they are (data/sources/webdataset_tars.py).

  python benchmarks/data.py [--pipelines=clip,cosmos] [--workers=0,1,2] [--batches=20]
      [--formats=array_record,webdataset]

Writes `--examples` records once (into --cache_dir): 256px JPEGs (quality 90) cropped at random positions, scales and
flips from scikit-learn's two bundled photographs, so that decoding costs what a natural photo costs, with captions
and long captions from the embedded dataset. Then, per pipeline and worker count, runs the real training iterator
(pipeline.train_iterator: read, decode, bad-record checks, the objective's views, tokenisation, batching) and prints
one JSON line: samples/s, the cores kept busy, and samples per CPU-second (per core), counting this process and its
worker processes (with psutil). With both formats, each configuration runs them back to back (ArrayRecord first) and
adds a line with the per-core ratio, webdataset / ArrayRecord, of that pair.

  clip:   ClipViews at 224px (resize the shorter side, centre crop; uint8, normalised in the step) and the 77-token
          caption
  cosmos: COSMOS multi-crop (2 global 224px + 6 local 96px crops, DINO colour/blur/solarise) and 8 text crops
  clip_randaugment: clip with a (0.9, 1) RandomResizedCrop and RandAugment(2, 9)
  cosmos_device, slip_device: cosmos, or SLIP's three views (CLIP crop + two SimCLR views at 224px), with
          config.data.augment_on='device': the host decodes, squashes to --device_source_size and draws each view's
          crop and colour parameters; the crops themselves are made in the train step (not timed here)
  slip: SLIP's three views made on the host
  siglip2, siglip2_device: SigLIP 2 past its switch (clip's view and caption, plus a 224px global and 8 local 96px
          DINO views for self-distillation and masked prediction), the views made on the host or, as above, in the
          train step

With --profile, also prints where the time of one inline pass goes (cProfile, top functions by own time).
"""
from __future__ import annotations

import cProfile
import io
import json
import os
import pathlib
import pstats
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_sample_images  # noqa: E402

from benchmarks.common import photo_jpeg  # noqa: E402
from vlp_jax.data.sources import synthetic_shapes as synthetic  # noqa: E402
from vlp_jax.data.storage import records

PIPELINES = ('clip', 'cosmos', 'clip_randaugment', 'cosmos_device', 'slip', 'slip_device', 'siglip2', 'siglip2_device')
_PIPELINES = flags.DEFINE_list('pipelines', ['clip', 'cosmos'], f'Any of {", ".join(PIPELINES)}.')
_WORKERS = flags.DEFINE_list('workers', ['0', '1', '2'], 'grain worker processes to try (0 = in the main process).')
_EXAMPLES = flags.DEFINE_integer('examples', 2048, 'Records to write.')
_SIDE = flags.DEFINE_integer('side', 256, 'Stored JPEG side.')
_IMAGE_SIZE = flags.DEFINE_integer('image_size', 224, 'Model image size.')
_BATCH = flags.DEFINE_integer('batch_size', 64, 'Batch size.')
_BATCHES = flags.DEFINE_integer('batches', 20, 'Batches timed per configuration (after 2 warm-up batches).')
_CACHE = flags.DEFINE_string('cache_dir', os.path.join(tempfile.gettempdir(), 'vlp_jax_bench_data'),
                             'Where the JPEG shards are written once.')
_FORMATS = flags.DEFINE_list('formats', ['array_record', 'webdataset'],
                              'Shard formats to read: array_record and/or webdataset (the same images and captions).')
_SOURCE_SIZE = flags.DEFINE_integer('device_source_size', 256, "config.data.device_source_size of the *_device "
                                   'pipelines.')
_PROFILE = flags.DEFINE_bool('profile', False, 'Print a cProfile of one inline pass per pipeline.')


def write_jpeg_shards(directory: str, count: int, side: int) -> list[str]:
  """`count` records of natural-photo JPEGs ([side, side], quality 90) in 4 shards; reused when present."""
  done = os.path.join(directory, f'done-{count}-{side}')
  paths = [os.path.join(directory, f'train-{i:05d}-of-00004.array_record') for i in range(4)]
  if os.path.exists(done):
    return paths
  os.makedirs(directory, exist_ok=True)
  photos = load_sample_images().images  # two 427 x 640 RGB photographs
  rng = np.random.default_rng(0)

  def examples():
    for i in range(count):
      text = synthetic.make_example(0, 'train', 'studio', i, 16)
      yield {**text, 'image': photo_jpeg(photos, i, rng, side), 'source': 'photos', 'key': f'photos/{i:07d}'}

  written = records.write_shards(examples(), directory, 'train', count, 4)
  assert written == paths
  pathlib.Path(done).touch()
  return paths


def write_tar_shards(directory: str, array_record_paths: list[str]) -> list[str]:
  """The records of `array_record_paths` as img2dataset tar shards (KEY.jpg, KEY.txt; one tar per ArrayRecord
  shard, the same bytes); reused when present."""
  import tarfile
  from vlp_jax.data.loading import pipeline
  tar_dir = os.path.join(directory, 'webdataset')
  paths = [os.path.join(tar_dir, f'{i:05d}.tar') for i in range(len(array_record_paths))]
  if all(os.path.exists(p) for p in paths):
    return paths
  os.makedirs(tar_dir, exist_ok=True)
  for source, path in zip(array_record_paths, paths):
    with tarfile.open(path + '.tmp', 'w') as tar:
      for example in pipeline.read_all([source]):
        key = example['key'].replace('/', '_')
        for extension, data in (('jpg', example['image']), ('txt', example['caption'].encode('utf-8'))):
          info = tarfile.TarInfo(f'{key}.{extension}')
          info.size = len(data)
          tar.addfile(info, io.BytesIO(data))
    os.replace(path + '.tmp', path)
  return paths


def views_for(pipeline_name: str, image_size: int, source_size: int = 256):
  from vlp_jax import objectives
  from vlp_jax.config import base_config
  config = base_config()
  config.model.vision.image_size = image_size
  config.model.text.context_length = 77
  if pipeline_name not in PIPELINES:
    raise ValueError(f"--pipelines has '{pipeline_name}'; valid choices: {', '.join(PIPELINES)}")
  method, _, placement = pipeline_name.partition('_')
  if method in ('cosmos', 'slip', 'siglip2'):
    config.objective = ml_collections.ConfigDict({'name': method})
    if method == 'siglip2':  # the late losses' views from step 0: the batches of a run past its switch
      config.objective.distill_start_fraction = 0.0
    if placement == 'device':
      config.data.augment_on, config.data.device_source_size = 'device', source_size
    return objectives.OBJECTIVES.get(method).views(config)
  if pipeline_name == 'clip_randaugment':
    config.data.crop_scale, config.data.augment = (0.9, 1.0), 'randaugment'
  return objectives.OBJECTIVES.get('clip').views(config)


def cpu_seconds() -> float | None:
  """CPU time (user + system) of this process and its live children (grain's workers); None without psutil."""
  try:
    import psutil
  except ImportError:
    return None
  me = psutil.Process()
  total = 0.0
  for process in [me, *me.children(recursive=True)]:
    try:
      times = process.cpu_times()
      total += times.user + times.system
    except psutil.Error:  # a child that has just exited
      continue
  return total


def measure(paths: list[str], views, workers: int, batch_size: int, batches: int, shard_format: str = 'array_record'
            ) -> dict[str, float]:
  """Wall-clock samples/s, and samples per CPU-second: the honest per-core figure, since decoding and resizing
  release the GIL, so even 'workers = 0' (grain's reader threads in this process) can use more than one core."""
  import functools
  from vlp_jax.data.loading import pipeline
  from vlp_jax.data.sources import webdataset_tars as webdataset
  from vlp_jax.data.storage import shards
  shard_records = shards.ShardRecords
  if shard_format == 'webdataset':  # the index is built (and cached) here, before the timing starts
    shard_records = functools.partial(webdataset.TarShardRecords,
                                      cache_dir=os.path.join(os.path.dirname(paths[0]), 'index'))
  iterator = pipeline.train_iterator(paths, views, pipeline.PipelineSettings(seed=0, global_batch_size=batch_size,
                                     process_index=0, process_count=1, num_workers=workers, num_threads=2),
                                     sources=['photos'] * len(paths), shard_records=shard_records)
  for _ in range(2):  # warm-up: worker start, file opening, tokenizer caches
    next(iterator)
  began, cpu_began = time.perf_counter(), cpu_seconds()
  for _ in range(batches):
    next(iterator)
  seconds, cpu_ended = time.perf_counter() - began, cpu_seconds()
  samples = batches * batch_size
  row = {'samples_per_sec': round(samples / seconds, 1)}
  if cpu_began is not None:
    row['cores_busy'] = round((cpu_ended - cpu_began) / seconds, 2)
    row['samples_per_cpu_sec'] = round(samples / max(cpu_ended - cpu_began, 1e-9), 1)
  return row


def profile(paths: list[str], views, examples: int = 128) -> list[dict]:
  """Own time of the top functions for decoding and viewing `examples` records in this process."""
  from vlp_jax.data.loading import pipeline
  from vlp_jax.data.storage import shards
  import grain
  loader = pipeline.LoadExamples(grain.MapDataset.source(shards.ShardRecords(paths)), paths)
  rng = np.random.default_rng(0)
  profiler = cProfile.Profile()
  profiler.enable()
  for i in range(examples):
    views.random_map(loader[i], rng)
  profiler.disable()
  stats = pstats.Stats(profiler)
  total = sum(v[2] for v in stats.stats.values())
  rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]
  return [{'function': f'{os.path.basename(f)}:{line}({name})', 'own_ms_per_example': round(1e3 * v[2] / examples, 3),
           'share': round(v[2] / total, 3)} for (f, line, name), v in rows]


def main(argv):
  del argv
  unknown = set(_FORMATS.value) - {'array_record', 'webdataset'}
  if unknown:
    raise app.UsageError(f'--formats has {sorted(unknown)}; valid choices: array_record, webdataset')
  paths = write_jpeg_shards(_CACHE.value, _EXAMPLES.value, _SIDE.value)
  paths_of = {'array_record': paths}
  if 'webdataset' in _FORMATS.value:
    paths_of['webdataset'] = write_tar_shards(_CACHE.value, paths)
  cores = os.cpu_count()
  for name in _PIPELINES.value:
    views = views_for(name, _IMAGE_SIZE.value, _SOURCE_SIZE.value)
    for workers in (int(w) for w in _WORKERS.value):
      per_core = {}
      for shard_format in _FORMATS.value:
        row = {'pipeline': name, 'format': shard_format, 'workers': workers, 'image_size': _IMAGE_SIZE.value,
               'stored_side': _SIDE.value, 'batch_size': _BATCH.value, 'machine_cores': cores,
               **measure(paths_of[shard_format], views, workers, _BATCH.value, _BATCHES.value, shard_format)}
        per_core[shard_format] = row.get('samples_per_cpu_sec')
        print(json.dumps(row), flush=True)
      if len(per_core) == 2 and all(per_core.values()):
        print(json.dumps({'pipeline': name, 'workers': workers, 'webdataset_over_array_record_per_core':
                          round(per_core['webdataset'] / per_core['array_record'], 3)}), flush=True)
    if _PROFILE.value:
      print(json.dumps({'pipeline': name, 'profile': profile(paths, views)}), flush=True)


if __name__ == '__main__':
  app.run(main)
