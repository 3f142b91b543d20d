#!/usr/bin/env python
"""What each shipped full-scale config needs, before launch: the tables of docs/scaling.md ("What a run needs").

  python benchmarks/run_needs.py                      # print the tables (markdown)
  python benchmarks/run_needs.py --write docs/scaling.md   # replace them between the markers there

Per config, at its real shapes (image size, global batch, micro-batches, dtype), on this machine's CPU, nothing run:
- host: the training data as the config's docstring describes it (DATA below: samples, shards, sources); what the
  trainer prints and checks at start (evalsets/budget.py's host_memory): the webdataset index and SaCo's teacher
  table, memory-mapped once per host (data/loading/host_memory.py's byte counts), and the eval images each process holds
  (evalsets/budget.py); and the shard files the data workers keep open: each reader is bounded by
  data/storage/shards.py's open_shards_budget at the soft limit the trainer raises to (OPEN_FILES_LIMIT, a common hard
  limit), with one reader per worker, or one per source per worker outside 'mixed' batches;
- compute: each tower's forward FLOPs per example and the whole train step's FLOPs (forward, backward and every
  component of the objective: extra views, heads, decoder, teacher), counted from the traced jaxpr
  (vlp_jax/training/flops.py: matmuls and convolutions, 2 per multiply-add, loops by their trip count; traced, not
  compiled). benchmarks/aot.py compiles the same step for a TPU topology with libtpu and reads XLA's count; on a
  2-core machine that is minutes per config, so this table counts the jaxpr instead (the step FLOPs aot.py reports
  agree with it to within the elementwise work, flops.py's docstring);
- evaluation: per evaluation, the images decoded again (streamed sets) and the texts encoded, the forward FLOPs of
  both (eval images + probe images through the image tower, texts through the text tower), and how many
  evaluations a run makes.
"""
from __future__ import annotations

import argparse
import atexit
import dataclasses
import functools
import math
import os
import shutil
import string
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, 'benchmarks')]

import jax  # noqa: E402
import numpy as np  # noqa: E402

import aot  # noqa: E402  # benchmarks/aot.py: the abstract batch of a config's views
from sentencepiece import sentencepiece_model_pb2  # noqa: E402
from vlp_jax import models, parallel  # noqa: E402
from vlp_jax.config import from_file  # noqa: E402
from vlp_jax.data.loading import host_memory  # noqa: E402
from vlp_jax.data.storage import shards
from vlp_jax.data.text.gemma_sentencepiece import GEMMA_FILENAME  # noqa: E402
from vlp_jax.data.text.tokenizer_factory import CLIP_BPE, GEMMA
from vlp_jax.evalsets import budget  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402
from vlp_jax.training.flops import function_flops, jaxpr_flops  # noqa: E402

BEGIN, END = '<!-- run_needs: begin (benchmarks/run_needs.py writes this table) -->', '<!-- run_needs: end -->'
TEACHER_DIM = 512  # configs/saco_cc3m.py's mimic targets: a ViT-B/32's embeddings
KEY_BYTES = 9  # a webdataset key such as '000012345': the index keeps keys at the longest key's width
# The soft limit after data/storage/shards.py raise_open_files_limit on a host whose hard limit is the common 1,048,576
# (at a hard limit of 1,024 each reader keeps open_shards_budget(1024) = 32 files).
OPEN_FILES_LIMIT = 2**20
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Data:
  """The training data a config's docstring describes: samples, shards (10,000 records each as `vlp_jax.convert`
  writes them, or the tars named), where the numbers come from, and how many sources (data.path's folders)."""
  samples: int
  shards: int
  source: str
  sources: int = 1


def _shards(samples: int, per_shard: int = 10_000) -> int:
  return math.ceil(samples / per_shard)


DATA = {
    'clip_cc3m': Data(2_800_000, _shards(2_800_000), 'CC3M, the config\'s CC3M_TRAIN_EXAMPLES'),
    'saco_cc3m': Data(2_800_000, _shards(2_800_000), 'CC3M'),
    'cosmos_cc3m': Data(2_823_019, _shards(2_823_019), 'CC3M, the paper\'s copy'),
    'slip_cc3m': Data(2_800_000, _shards(2_800_000), 'CC3M'),
    'zerovl_multisource': Data(14_230_000, _shards(14_230_000), 'SBU + VG + CC3M + CC12M', sources=4),
    # WebLI is not public: the docstring's 100,000 tars, at an assumed 10,000 samples each
    'siglip2_webli': Data(1_000_000_000, 100_000, '100,000 tars x 10,000 samples (assumed)'),
    'clip_continue': Data(595_000, _shards(595_000), 'LLaVA-595K'),
    'saco_continue': Data(595_000, _shards(595_000), 'LLaVA-595K'),
    'siglip2_continue': Data(595_000, _shards(595_000), 'LLaVA-595K as tars, the config\'s TRAIN_EXAMPLES'),
}


@functools.lru_cache(maxsize=None)
def stand_in_gemma_tokenizer(vocab_size: int) -> str:
  """A SentencePiece model file with Gemma's special pieces and `vocab_size` pieces in all, for a config whose
  tokenizer file is the user's (siglip2_webli): the step's shapes depend on the vocabulary's size only."""
  model = sentencepiece_model_pb2.ModelProto()
  model.trainer_spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
  model.normalizer_spec.name, model.normalizer_spec.add_dummy_prefix = 'identity', False
  kinds = sentencepiece_model_pb2.ModelProto.SentencePiece
  pieces = [('<pad>', kinds.CONTROL), ('<eos>', kinds.CONTROL), ('<bos>', kinds.CONTROL), ('<unk>', kinds.UNKNOWN)]
  pieces += [(c, kinds.NORMAL) for c in [*string.printable.strip(), '\u2581']]
  pieces += [(f'\u2581x{i}', kinds.NORMAL) for i in range(vocab_size - len(pieces))]
  for text, kind in pieces:
    piece = model.pieces.add()
    piece.piece, piece.type, piece.score = text, kind, -1.0
  directory = tempfile.mkdtemp(prefix='run_needs_')
  atexit.register(shutil.rmtree, directory, ignore_errors=True)
  path = os.path.join(directory, GEMMA_FILENAME)
  with open(path, 'wb') as f:
    f.write(model.SerializeToString())
  return path


def with_tokenizer(config):
  """`config`, with a stand-in tokenizer file of the same vocabulary size where it names the user's (empty path)."""
  text = config.model.text
  if text.get('tokenizer', CLIP_BPE) == GEMMA and not text.get('tokenizer_path', ''):
    text.tokenizer_path = stand_in_gemma_tokenizer(text.vocab_size)
  elif text.get('tokenizer', CLIP_BPE) != CLIP_BPE and not text.get('tokenizer_path', ''):
    raise SystemExit(f"config.model.text.tokenizer={text.tokenizer!r} needs a tokenizer_path for its shapes")
  return config


def index_bytes(config, data: Data) -> int:
  """The webdataset index of the whole training set (data/loading/host_memory.py); 0 for ArrayRecord, whose files carry
  their own index."""
  return host_memory.webdataset_index_bytes(data.samples, KEY_BYTES) if config.data.name == 'webdataset' else 0


def teacher_bytes(config, data: Data) -> int:
  """SaCo's pre-extracted mimic targets, one TEACHER_DIM row per sample (data/loading/host_memory.py; 0 without
  them)."""
  if not aot.needs_teacher_vectors(config):
    return 0
  return host_memory.teacher_table_bytes(data.samples, TEACHER_DIM, KEY_BYTES)


def open_files(config, data: Data) -> tuple[int, int]:
  """(shard files a process keeps open at most, files each worker keeps): a reader keeps at most open_shards_budget
  at OPEN_FILES_LIMIT; a worker (or the process itself, without workers) has one reader, or outside 'mixed' batches
  one per source (data/loading/mixing.py), and never more open files than there are shards."""
  readers = 1 if config.data.mixing == 'mixed' else data.sources
  per_worker = min(data.shards, readers * shards.open_shards_budget(OPEN_FILES_LIMIT))
  return per_worker * max(1, config.data.num_workers), per_worker


def tower_flops(config) -> tuple[float, float]:
  """Forward FLOPs of one example through the image tower and through the text tower, at the config's shapes."""
  model = models.build_model(config.model)
  size, length = config.model.vision.image_size, config.model.text.context_length
  images = jax.ShapeDtypeStruct((1, size, size, 3), np.float32)
  tokens = jax.ShapeDtypeStruct((1, length), np.int32)
  params = jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, size, size, 3), np.float32),
                                             np.zeros((1, length), np.int32)))
  image = function_flops(lambda p, x: model.apply(p, x, with_tokens=False, method=model.encode_image), params,
                         images)
  text = function_flops(lambda p, t: model.apply(p, t, with_tokens=False, method=model.encode_text), params, tokens)
  return image, text


def traced_step(config):
  """The config's train step over the global batch, traced (not compiled) on one CPU device."""
  config = config.copy_and_resolve_references()
  run = Experiment.from_config(config, parallel.make_mesh(1, jax.devices()[:1]))
  rng = jax.random.key(config.seed)
  return run.traced_step(aot.abstract_batch(config, TEACHER_DIM), jax.ShapeDtypeStruct(rng.shape, rng.dtype))


def step_flops(config) -> tuple[float, float]:
  """FLOPs of one train step over the global batch (every micro-batch): with every phase of the objective on (of a
  `cond`, the costliest branch), and with only those from the start (the cheapest)."""
  jaxpr = traced_step(config).jaxpr
  return jaxpr_flops(jaxpr, max), jaxpr_flops(jaxpr, min)


def needs(name: str) -> dict:
  """Every figure of the tables for configs/<name>.py."""
  config = with_tokenizer(from_file(os.path.join(ROOT, 'configs', f'{name}.py')))
  data = DATA[name]
  costs = budget.eval_costs(config)
  image, text = tower_flops(config)
  step, early = step_flops(config)
  size = config.model.vision.image_size
  eval_images = sum(c.images + c.probe_images for c in costs)
  eval_texts = sum(c.texts for c in costs)
  mapped = {'webdataset index': index_bytes(config, data), 'teacher table': teacher_bytes(config, data)}
  memory = budget.host_memory(config, {part: size for part, size in mapped.items() if size})  # as the trainer prints
  held, host = memory.per_process['eval sets'], memory.total()
  files, per_worker = open_files(config, data)
  return {
      'name': name, 'model': config.model.name, 'image_size': size, 'batch': config.batch_size,
      'micro': config.accumulation.micro_batch_size if config.accumulation.mode != 'none' else 0,
      'steps': config.total_steps, 'data': data, 'workers': config.data.num_workers,
      'index': index_bytes(config, data), 'teacher': teacher_bytes(config, data), 'held': held,
      'probe': budget.probe_host_bytes(config), 'host': host,
      'open_files': files, 'per_worker': per_worker,
      'image_flops': image, 'text_flops': text, 'step_flops': step, 'early_step_flops': early,
      'pair_flops': 3 * (image + text) * config.batch_size,  # forward + backward (2x) of the main image-text pair
      'evaluations': math.ceil(config.total_steps / config.eval.every_steps),
      'decoded': sum(c.decoded_per_eval for c in costs), 'eval_images': eval_images, 'eval_texts': eval_texts,
      'eval_flops': eval_images * image + eval_texts * text,
      'eval_sets': ', '.join(config.eval.datasets), 'eval_tasks': ', '.join(config.eval.tasks),
  }


def _gib(value: float) -> str:
  return f'{value / GIB:.1f}' if value else '0'


def _count(value: float) -> str:
  for unit, scale in (('B', 1e9), ('M', 1e6), ('k', 1e3)):
    if value >= scale:
      return f'{value / scale:.3g}{unit}'
  return f'{value:g}'


def _early(row: dict) -> str:
  """'; N before its late phases' where the step is cheaper before a phase that starts late (SigLIP 2's switch)."""
  early, full = row['early_step_flops'], row['step_flops']
  return f'; {early / 1e12:.0f} before its late phases' if early < 0.995 * full else ''


def tables(rows: list[dict]) -> str:
  """The two markdown tables and their notes."""
  host = ['| config | training data: samples, shards | webdataset index GiB (mapped once per host) | teacher table '
          'GiB (mapped once per host) | eval images held per process GiB (of which probe) | host memory, one process '
          'per host, GiB | open shard files per process, at most (per worker x workers) |',
          '|---|---|---|---|---|---|---|']
  compute = ['| config | model, image px, global batch (micro) | forward GFLOPs per example: image / text | train '
             'step TFLOPs (the image-text pair / the rest) | evaluations per run | per evaluation: images decoded '
             'again, texts encoded, TFLOPs |',
             '|---|---|---|---|---|---|']
  for r in rows:
    data = r['data']
    host.append(f"| {r['name']} | {_count(data.samples)} ({data.source}), {_count(data.shards)} shards "
                f"| {_gib(r['index'])} | {_gib(r['teacher'])} | {_gib(r['held'])} ({_gib(r['probe'])}) "
                f"| {_gib(r['host'])} | {_count(r['open_files'])} ({_count(r['per_worker'])} x {max(1, r['workers'])} "
                'workers) |')
    micro = f" ({r['micro']})" if r['micro'] else ''
    rest = max(0.0, r['step_flops'] - r['pair_flops'])  # ~0 for plain CLIP: the logits and pooled rows differ
    compute.append(
        f"| {r['name']} | {r['model']}, {r['image_size']}, {r['batch']}{micro} "
        f"| {r['image_flops'] / 1e9:.2f} / {r['text_flops'] / 1e9:.2f} "
        f"| {r['step_flops'] / 1e12:.0f} ({r['pair_flops'] / 1e12:.0f} / {rest / 1e12:.0f}){_early(r)} "
        f"| {r['evaluations']} | {_count(r['decoded'])}, {_count(r['eval_texts'])}, {r['eval_flops'] / 1e12:.0f} |")
  return '\n'.join([*host, '', *compute])


def write_between_markers(path: str, text: str) -> None:
  """Replace what lies between BEGIN and END in `path` with `text`."""
  with open(path, encoding='utf-8') as f:
    content = f.read()
  if BEGIN not in content or END not in content:
    raise SystemExit(f'{path} has no "{BEGIN}" ... "{END}" block to replace')
  head, rest = content.split(BEGIN, 1)
  tail = rest.split(END, 1)[1]
  with open(path, 'w', encoding='utf-8') as f:
    f.write(f'{head}{BEGIN}\n{text}\n{END}{tail}')


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--write', default='', help='a markdown file whose run_needs block to replace')
  parser.add_argument('--configs', default=','.join(DATA), help='comma-separated config names (configs/<name>.py)')
  args = parser.parse_args()
  rows = []
  for name in args.configs.split(','):
    rows.append(needs(name))
    print(f'{name}: done', file=sys.stderr, flush=True)
  text = tables(rows)
  if args.write:
    write_between_markers(args.write, text)
  print(text)


if __name__ == '__main__':
  main()
