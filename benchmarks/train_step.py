#!/usr/bin/env python
"""Train-step speed and utilisation: one JSON line per (model, batch size, objective, precision).

  python benchmarks/train_step.py --model=ViT-B-32 --batch_size=32 --objective=clip --precision=fp32
  python benchmarks/train_step.py --model=tiny,ViT-B-32 --batch_size=32,128 \
      --objective=clip,siglip,saco,slip,cosmos,zerovl

Each line has the compile time, the step time (median of --steps after --warmup), samples/s, the step's FLOPs from
XLA's cost analysis (on a GPU, the traced program's matmuls: training.flops.device_flops) and the FLOP/s achieved, and
the utilisation: achieved FLOP/s over the machine's peak, measured in the same run as the fastest of 15 runs of a
large matmul (--peak_size square; fp32 on CPU, bf16 on GPU), and `mfu`, the trainer's perf/mfu: the architecture's
FLOPs per step (`architecture_flops_per_step`, training/flops.py: every row through every block) per second over the
device's published bf16 peak (vlp_jax/hardware.py; None on a CPU), and `mfu_executed`, the same for the step's own
count (`flops_per_step`; this was `mfu` before issue 65). With --scan_layers the FLOPs count every
block (XLA counts the layer loop's body once). It also has the compiled step's peak memory per device (arguments +
outputs + temporaries) and the process's peak RSS.

--patch_dropout takes several fractions (`--patch_dropout=0,0.5`), --attention several routes
(`--attention=xla,cudnn`, config.model.attention), --remat both settings (`--remat=false,true`), --embedding_grad
several ways of summing the token table's gradient (config.model.text.embedding_grad) and --patch_embedding both
patch embeddings (`--patch_embedding=conv,matmul`, config.model.vision.patch_embedding): the variants of each
setting are compiled first, then timed in --rounds alternating rounds (A B A B ...), and each row after the first says its step time over the
first variant's, round by round (`speedup_vs_first`: the median of the per-round ratios, with min and max), so a
comparison holds while the machine's speed drifts.

Models are the presets of vlp_jax.models (names as in open_clip: ViT-B-32, ViT-B-16, ...; and 'tiny'). Objectives
are registered objective names or terms ('saco' adds the SaCo term to CLIP), with their default options. The batch
is real: the objective's own views of embedded-dataset examples rendered at the model's image size, repeated to the
batch size. The step runs on one device (on CPU, one device uses every core). --model_config=tests/support.py keeps
the preset's name with the test suite's micro shapes (a smoke run: tests/integration/test_benchmarks.py).
"""
from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The speed setting of the CPU trainer (`python -m vlp_jax.main` sets it too), before jax starts its threads;
# VLP_JAX_MALLOC=default measures without it.
from vlp_jax.cli import allocator  # noqa: E402

allocator.retain_freed_memory()

from absl import app, flags  # noqa: E402

from benchmarks.common import ratio_range  # noqa: E402

_MODELS = flags.DEFINE_list('model', ['ViT-B-32'], 'Model presets (vlp_jax.models.PRESETS).')
_BATCHES = flags.DEFINE_list('batch_size', ['32'], 'Global batch sizes.')
_OBJECTIVES = flags.DEFINE_list('objective', ['clip'], 'Objectives (or the term saco).')
_PRECISIONS = flags.DEFINE_list('precision', ['fp32'], 'fp32 and/or bf16 (the model dtype; parameters stay fp32).')
_STEPS = flags.DEFINE_integer('steps', 5, 'Timed steps.')
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Untimed steps after compiling.')
_PEAK_SIZE = flags.DEFINE_integer('peak_size', 0, 'Side of the peak matmul (0: 2048 on CPU, 8192 on GPU).')
_REMATS = flags.DEFINE_list('remat', ['false'], "Rematerialise each transformer block: 'false' and/or 'true'; "
                            "several are timed in alternating rounds, as --patch_dropout's.")
_SCAN = flags.DEFINE_bool('scan_layers', False, "Run each tower's blocks as one scanned layer.")
_PATCH_DROPOUTS = flags.DEFINE_list('patch_dropout', ['0'], 'Fractions of image patches dropped in training (FLIP); '
                                     'several are timed in alternating rounds.')
_ATTENTIONS = flags.DEFINE_list('attention', ['auto'], "Attention routes (config.model.attention: 'auto', 'xla', "
                                 "'padded', 'cudnn', 'pallas'); several are timed in alternating rounds, as "
                                 "--patch_dropout's.")
_EMBEDDING_GRADS = flags.DEFINE_list('embedding_grad', ['scatter'], "How the token table's gradient is summed "
                                      "(config.model.text.embedding_grad: 'scatter', 'sorted', 'drop_after_eot'); "
                                      "several are timed in alternating rounds, as --patch_dropout's.")
_PATCH_EMBEDDINGS = flags.DEFINE_list('patch_embedding', ['conv'], "The image tower's patch embedding "
                                      "(config.model.vision.patch_embedding: 'conv', 'matmul'); several are timed "
                                      "in alternating rounds, as --patch_dropout's.")
_ROUNDS = flags.DEFINE_integer('rounds', 1, 'Alternating timing rounds over the variants of one setting.')
_MODEL_CONFIG = flags.DEFINE_string('model_config', '', "A config file whose model's shapes (embed_dim, the towers' "
                                    'sizes) replace the preset\'s, keeping its name: tests/support.py gives the test '
                                    "suite's micro model, for a smoke run that compiles in seconds.")


def median_seconds(fn, repeats: int) -> float:
  """Median wall time of `fn()` (which must block until its result is ready)."""
  times = []
  for _ in range(repeats):
    began = time.perf_counter()
    fn()
    times.append(time.perf_counter() - began)
  return statistics.median(times)


def matmul_peak(size: int, dtype) -> dict[str, float]:
  """FLOP/s of a [size, size] x [size, size] matmul in `dtype`: the machine's practical peak for dense compute."""
  import jax
  a = jax.random.normal(jax.random.key(0), (size, size), dtype)
  b = jax.random.normal(jax.random.key(1), (size, size), dtype)
  matmul = jax.jit(lambda x, y: x @ y)
  matmul(a, b).block_until_ready()
  # The fastest of several runs: the peak is what the machine can do, so noise must not lower it (which would
  # flatter the utilisation).
  seconds = min(median_seconds(lambda: matmul(a, b).block_until_ready(), 1) for _ in range(15))
  return {'peak_flops_per_sec': 2 * size**3 / seconds, 'peak_matmul_size': size}


def available_memory_bytes() -> int | None:
  """Free host memory (psutil), None when unknown."""
  try:
    import psutil
  except ImportError:
    return None
  return int(psutil.virtual_memory().available)


def variant_settings(variant: tuple) -> dict:
  """A variant (patch dropout, attention route, remat, embedding gradient, patch embedding) as a row's fields."""
  return dict(zip(('patch_dropout', 'attention', 'remat', 'embedding_grad', 'patch_embedding'), variant))


def with_levers(config, embedding_grad: str, patch_embedding: str):
  """`config` with the text tower's embedding gradient and the image tower's patch embedding set where they differ
  from the defaults (a config without a key keeps its default), validated again."""
  from vlp_jax.config import validate
  if embedding_grad != 'scatter':
    config.model.text.embedding_grad = embedding_grad
  if patch_embedding != 'conv':
    config.model.vision.patch_embedding = patch_embedding
  validate(config, num_devices=1)
  return config


def prepare(model: str, batch_size: int, objective: str, precision: str, patch_dropout: float, attention: str,
            remat: bool, embedding_grad: str = 'scatter', patch_embedding: str = 'conv'):
  """Compile one variant's step. Returns (row, step): the row so far (compile time, memory, FLOPs) and a function
  that runs one step to completion, or (row with 'skipped', None) when the step would not fit in memory."""
  import jax
  from benchmarks.common import build_config, compiled_memory, real_batch, with_model_shapes
  from vlp_jax import parallel
  from vlp_jax.hardware import peak_flops
  from vlp_jax.training import Experiment
  from vlp_jax.training.flops import device_flops
  config = build_config(model, batch_size, objective, precision, remat, patch_dropout, _SCAN.value, attention)
  if _MODEL_CONFIG.value:
    config = with_model_shapes(config, _MODEL_CONFIG.value)
  config = with_levers(config, embedding_grad, patch_embedding)
  device = jax.devices()[0]
  run = Experiment.from_config(config, parallel.make_mesh(1, [device]))
  state = jax.device_put(run.init_state(jax.random.key(0)), device)
  batch = jax.device_put(real_batch(config, batch_size), device)
  rng = jax.random.key(1)
  began = time.perf_counter()
  with jax.set_mesh(run.mesh):
    traced = jax.jit(run.train_step, donate_argnums=0).trace(state, batch, rng)
    lowered = traced.lower()
    compiled = lowered.compile()
  compile_seconds = time.perf_counter() - began
  memory = compiled_memory(compiled)
  available = available_memory_bytes()
  row = {'model': model, 'batch_size': batch_size, 'objective': objective, 'precision': precision,
         'remat': remat, 'scan_layers': _SCAN.value, 'patch_dropout': patch_dropout, 'attention': attention,
         'embedding_grad': embedding_grad, 'patch_embedding': patch_embedding,
         'device': device.device_kind, 'platform': device.platform,
         'compile_seconds': round(compile_seconds, 2), 'peak_bytes': memory['peak_bytes'],
         'xla_flags': os.environ.get('XLA_FLAGS', '').strip()}
  if device.platform == 'cpu' and available and memory['peak_bytes'] > 0.9 * available:
    return {**row, 'skipped': f"the step needs {memory['peak_bytes'] / 1e9:.1f} GB and {available / 1e9:.1f} GB "
                              'are free; try a smaller --batch_size or --remat=true'}, None
  flops = device_flops(traced, compiled, device.platform, 1)
  counter = run.unrolled_flops  # a scanned model: XLA counts the layer loop's body once
  if counter is not None and flops and device.platform != 'gpu':
    flops += counter.missing(lowered, batch, rng)
  published = peak_flops(device.device_kind)
  # what `mfu` counts (PaLM's model FLOPs: every row through every block, no remat, attention on the true rows)
  architecture = run.architecture_flops.traced_flops(batch, rng)
  row = {**row, 'flops_per_step': flops, 'architecture_flops_per_step': architecture, 'published_peak': published}

  def step():
    nonlocal state
    state, metrics = compiled(state, batch, rng)
    jax.block_until_ready(metrics)

  for _ in range(_WARMUP.value):
    step()
  return row, step


def timed_row(row: dict, seconds: float, peak: dict) -> dict:
  """`row` from `prepare` completed with the step time and what follows from it."""
  published = row.pop('published_peak')
  achieved = row['flops_per_step'] / seconds
  return {
      **row, 'step_seconds': round(seconds, 4), 'samples_per_sec': round(row['batch_size'] / seconds, 2),
      'achieved_flops_per_sec': achieved, 'peak_flops_per_sec': peak['peak_flops_per_sec'],
      'peak_matmul_size': peak['peak_matmul_size'], 'utilisation': round(achieved / peak['peak_flops_per_sec'], 4),
      # as the trainer's perf/mfu and perf/mfu_executed: the architecture's FLOPs and the executed ones
      # (flops_per_step) against the device's published bf16 peak (hardware.py); None where unknown (CPU)
      'mfu': round(row['architecture_flops_per_step'] / seconds / published, 4) if published else None,
      'mfu_executed': round(achieved / published, 4) if published else None,
      'peak_rss_bytes': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      'machine': platform.processor() or platform.machine(), 'cpus': os.cpu_count(),
  }


def measure_variants(model: str, batch_size: int, objective: str, precision: str,
                     variants: list[tuple[float, str, bool, str, str]],
                     peak: dict, rounds: int) -> list[dict]:
  """One row per (patch dropout, attention route, remat, embedding gradient, patch embedding) variant of a setting:
  all compiled first, then timed in `rounds` alternating rounds (each round the median of --steps steps per
  variant). A row's step time is the median over rounds; rows after the first carry `speedup_vs_first`, the first
  variant's step time over theirs, round by round."""
  prepared = []
  for variant in variants:
    try:
      prepared.append(prepare(model, batch_size, objective, precision, *variant))
    except Exception as error:  # noqa: BLE001 -- a route the backend refuses (cuDNN's limits): say so, time the rest
      prepared.append(({'model': model, 'batch_size': batch_size, 'objective': objective, 'precision': precision,
                        **variant_settings(variant), 'failed': f'{type(error).__name__}: {str(error)[:2000]}'}, None))
  runnable = [i for i, (_, step) in enumerate(prepared) if step is not None]
  per_round = {i: [] for i in runnable}
  for _ in range(rounds):
    for i in runnable:
      per_round[i].append(median_seconds(prepared[i][1], _STEPS.value))
  rows = []
  for i, (row, step) in enumerate(prepared):
    if step is None:
      rows.append(row)
      continue
    result = timed_row(row, statistics.median(per_round[i]), peak)
    result['round_step_seconds'] = [round(t, 6) for t in per_round[i]]  # to the microsecond: ratios of them stay exact
    if i and 0 in per_round:
      ratios = [first / mine for first, mine in zip(per_round[0], per_round[i])]
      result['speedup_vs_first'] = {**ratio_range(ratios),
                                    **{f'first_{k}': v for k, v in variant_settings(variants[0]).items()}}
    rows.append(result)
  return rows


def parse_remats(values: list[str]) -> list[bool]:
  """--remat's values ('false', 'true') as booleans; anything else raises ValueError naming it."""
  for value in values:
    if value.lower() not in ('true', 'false'):
      raise ValueError(f"--remat has '{value}'; expected 'false' and/or 'true' (comma separated)")
  return [value.lower() == 'true' for value in values]


def main(argv):
  del argv
  remats = parse_remats(_REMATS.value)
  import jax
  import jax.numpy as jnp
  on_gpu = jax.devices()[0].platform == 'gpu'
  # The peak is the machine's, whatever the step's precision: fp32 on CPU, bf16 on GPU (its tensor cores).
  peak = matmul_peak(_PEAK_SIZE.value or (8192 if on_gpu else 2048), jnp.bfloat16 if on_gpu else jnp.float32)
  for model in _MODELS.value:
    for batch_size in (int(b) for b in _BATCHES.value):
      for objective in _OBJECTIVES.value:
        for precision in _PRECISIONS.value:
          variants = [(float(f), a, r, g, p) for f in _PATCH_DROPOUTS.value for a in _ATTENTIONS.value
                      for r in remats for g in _EMBEDDING_GRADS.value for p in _PATCH_EMBEDDINGS.value]
          for row in measure_variants(model, batch_size, objective, precision, variants, peak, _ROUNDS.value):
            print(json.dumps(row), flush=True)


if __name__ == '__main__':
  app.run(main)
