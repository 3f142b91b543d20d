#!/usr/bin/env python
"""Ahead-of-time compilation of the real train step for a TPU pod, on a machine without one.

  pip install -e ".[tpu]"   # libtpu: the TPU compiler, which runs on any x86 CPU
  python benchmarks/aot.py --config=configs/saco_cc3m.py --topology=v5p:4x4x4 [--config.key=value ...]

libtpu describes a TPU topology (`jax.experimental.topologies`) without the chips being there; the step that
`python -m vlp_jax.main` would run (the config's model, objective, accumulation, FSDP mesh, dtype, remat policy and
scanned layers, at the config's global batch) is lowered and compiled for it. Nothing runs: the batch and the state
are shapes only.

Prints one JSON line per topology:
  - per-chip HBM from the compiler's memory analysis: arguments, temporaries, total (arguments + outputs not
    aliased to the donated state + temporaries), and total as a fraction of the chip's HBM; `fits` says whether it
    fits, and a config that does not fit gets `advice` naming the knobs that would make it fit;
  - FLOPs and HBM bytes per chip per step, from the compiler's cost analysis (rematerialised recomputation
    included). The analysis counts a loop body once, so with accumulation they are multiplied by the number of
    micro-batches (the loops over them hold nearly all the work; `cost_scaled_by_micro_batches` says by how much).
    With scanned layers the blocks the layer loop hides are added (their FLOPs from the unrolled step, lowered, not
    compiled), and the HBM bytes are scaled as the lowered programs' bytes scale (an estimate);
  - the bytes each kind of collective moves per chip per step, read from the compiled HLO;
  - `bxb_arrays`: arrays in the compiled program, other than parameter-shaped ones, with two dimensions of at least
    the global batch size (a [B, B] logit matrix on one chip; row-sharded losses keep this at 0);
  - a ROOFLINE ESTIMATE, not a measurement: step time = max(FLOPs / the chip's published bf16 peak, HBM bytes / its
    published HBM bandwidth), collectives over ICI left out; and the MFU that step time would give.

With TPU_SKIP_MDS_QUERY=1 (set here) libtpu's warnings about the missing TPU metadata server are harmless.
ALLOW_MULTIPLE_LIBTPU_LOAD=1 (also set here) lets it run beside other jax processes.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import time

os.environ.setdefault('TPU_SKIP_MDS_QUERY', '1')
# Every jax process on a machine with libtpu takes libtpu's lockfile (even where no TPU is found, as here); without
# this a training run or a test worker beside this script would stop it from describing the topology.
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
from absl import app, flags  # noqa: E402

from vlp_jax import config as config_lib, parallel  # noqa: E402
from vlp_jax.hardware import ACCELERATORS  # noqa: E402
from vlp_jax.training import Experiment  # noqa: E402
from vlp_jax.training.flops import program_cost  # noqa: E402

# Published per-chip figures of the TPUs (vlp_jax/hardware.py's table, by its short names: 'v5e'): HBM in GiB, dense
# bf16 FLOP/s, HBM bytes/s.
CHIPS = {name: {'hbm_gib': chip.hbm_gib, 'bf16_flops': chip.bf16_flops, 'hbm_bytes_per_sec': chip.hbm_bytes_per_sec}
         for name, chip in ACCELERATORS.items() if chip.platform == 'tpu'}
COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all', 'collective-permute')
DTYPE_BYTES = {'pred': 1, 's4': 0.5, 'u4': 0.5, 's8': 1, 'u8': 1, 'f8e4m3fn': 1, 'f8e5m2': 1, 'bf16': 2, 'f16': 2,
               's16': 2, 'u16': 2, 'f32': 4, 's32': 4, 'u32': 4, 'f64': 8, 's64': 8, 'u64': 8, 'c64': 8, 'c128': 16}
_ARRAY = re.compile(r'\b([a-z]+[0-9]+[a-z0-9]*|pred)\[([0-9,]*)\]')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?[\w.\-]+ = (.+?) (' + '|'.join(COLLECTIVES) + r')(-start|-done)?\(')


def chip_of(topology: str) -> dict:
  """'v5p:4x4x4' -> that chip's figures, with 'chip' and 'chips' (the product of the topology's dims)."""
  name, _, dims = topology.partition(':')
  if name not in CHIPS or not re.fullmatch(r'[0-9]+(x[0-9]+)+', dims):
    raise ValueError(f"--topology='{topology}' is not '<chip>:<dims>' (e.g. v5e:4x4, v5p:4x4x4); valid chips: "
                     f'{sorted(CHIPS)}')
  return {'chip': name, 'chips': math.prod(int(d) for d in dims.split('x')), **CHIPS[name]}


def tpu_devices(topology: str) -> list:
  """The devices of a TPU topology described by libtpu (no TPU needed), hosts of 2x2 chips."""
  try:
    from jax.experimental import topologies
    desc = topologies.get_topology_desc(platform='tpu', topology_name=topology, chip_config_name='default',
                                        chips_per_host_bounds=(2, 2, 1), num_slices=1)
  except Exception as error:  # libtpu missing, or a topology it does not know
    raise RuntimeError(f'cannot describe TPU topology {topology}: {error}. Install the TPU compiler with '
                       '`pip install -e ".[tpu]"`.') from error
  return list(desc.devices)


def array_bytes(shape_text: str) -> float:
  """Bytes of every array in an HLO shape, e.g. '(f32[512,512]{1,0}, bf16[8]{0})' -> 1048592."""
  total = 0.0
  for dtype, dims in _ARRAY.findall(shape_text):
    total += DTYPE_BYTES.get(dtype, 4) * math.prod(int(d) for d in dims.split(',') if d)
  return total


def collective_bytes(hlo_text: str) -> dict[str, float]:
  """{kind: bytes of the results of that kind of collective, per chip per step} from compiled HLO text.

  Asynchronous pairs count once, at their `-done` (whose result is the collective's output alone). Ops inside a
  loop body (accumulation's micro-batches) count once per appearance in the text, not per iteration.
  """
  out = {kind: 0.0 for kind in COLLECTIVES}
  for line in hlo_text.splitlines():
    match = _INSTRUCTION.match(line)
    if match and match.group(3) != '-start':
      out[match.group(2)] += array_bytes(match.group(1))
  return out


def bxb_arrays(hlo_text: str, batch_size: int, parameter_shapes: frozenset = frozenset()) -> int:
  """Distinct array shapes in the HLO with at least two dimensions >= the global batch size ([B, B] logits), other
  than the shapes in `parameter_shapes` (sorted dimension tuples: a 4096 x 4096 weight is not a logit matrix)."""
  shapes = set()
  for _, dims in _ARRAY.findall(hlo_text):
    sizes = tuple(int(d) for d in dims.split(',') if d)
    if sum(size >= batch_size for size in sizes) >= 2 and tuple(sorted(sizes)) not in parameter_shapes:
      shapes.add(sizes)
  return len(shapes)


def needs_teacher_vectors(config) -> bool:
  """Whether the batch carries pre-extracted mimic targets (SaCo with beta > 0 and teacher='embeddings')."""
  saco = config.objective.get('saco')
  return bool(saco is not None and saco.get('beta', 0.0) > 0 and saco.get('teacher', 'embeddings') == 'embeddings')


def abstract_batch(config, teacher_dim: int) -> dict:
  """{name: ShapeDtypeStruct [global batch, ...]}: the objective's views of one embedded-dataset example at the
  model's image size, as the data pipeline would stack them."""
  import jax
  import numpy as np
  from vlp_jax import objectives
  from vlp_jax.data.loading import pipeline
  from vlp_jax.data.sources import synthetic_shapes as synthetic
  from vlp_jax.data.storage import records
  example = synthetic.make_example(0, 'train', synthetic.SOURCES[0], 0, config.model.vision.image_size)
  decoded = pipeline.DecodeRecord().map(records.serialize(example))
  if needs_teacher_vectors(config):
    decoded['teacher'] = np.zeros(teacher_dim, np.float32)
  views = objectives.OBJECTIVES.get(config.objective.name).views(config).random_map(decoded, np.random.default_rng(0))
  return {k: jax.ShapeDtypeStruct((config.batch_size, *np.shape(v)), np.asarray(v).dtype) for k, v in views.items()}


def out_of_memory(message: str) -> tuple[float, float] | None:
  """(bytes needed, bytes available) from the TPU compiler's out-of-HBM error, None for any other error.

  'RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (21.86G) exceeds
  available HBM (15.75G).' -> (21.86 GiB, 15.75 GiB) in bytes.
  """
  match = re.search(r'Ran out of memory.*?\(([0-9.]+)([KMGT])\).*?\(([0-9.]+)([KMGT])\)', message, re.S)
  if 'RESOURCE_EXHAUSTED' not in message or not match:
    return None
  scale = {'K': 2**10, 'M': 2**20, 'G': 2**30, 'T': 2**40}
  return float(match.group(1)) * scale[match.group(2)], float(match.group(3)) * scale[match.group(4)]


def fit_advice(config, chip: dict) -> list[str]:
  """The knobs not yet turned that lower per-chip memory, most effective first."""
  advice = []
  if config.accumulation.mode == 'none':
    advice.append('--config.accumulation.mode=decoupled (the exact full-batch gradient) with '
                  f'--config.accumulation.micro_batch_size={max(config.batch_size // 8, chip["chips"])}: activations '
                  'of one micro-batch at a time')
  elif config.accumulation.micro_batch_size > chip['chips']:
    advice.append(f'a smaller --config.accumulation.micro_batch_size (now {config.accumulation.micro_batch_size})')
  if not config.model.get('remat', False):
    advice.append('--config.model.remat=True --config.model.scan_layers=True: recompute each block in the backward '
                  'pass, one block live at a time')
  elif not config.model.get('scan_layers', False):
    advice.append('--config.model.scan_layers=True: with remat, bounds what is live to one block (unrolled, the '
                  'schedule keeps more)')
  elif config.model.get('remat_policy', 'nothing_saveable') != 'nothing_saveable':
    advice.append('--config.model.remat_policy=nothing_saveable: keep only each block\'s input')
  if config.model.dtype == 'float32':
    advice.append('--config.model.dtype=bfloat16: half the activation memory')
  if config.mesh.fsdp < chip['chips']:
    advice.append(f'--config.mesh.fsdp={chip["chips"]} (now {config.mesh.fsdp}): shard parameters and optimizer '
                  'state over the chips')
  return advice


def compile_for(config, topology: str, teacher_dim: int = 512, name: str = '') -> dict:
  """Compile `config`'s train step for `topology`; the report described in the module docstring."""
  chip = chip_of(topology)
  devices = tpu_devices(topology)
  config = config.copy_and_resolve_references()
  if needs_teacher_vectors(config) and not config.data.teacher_embeddings:
    config.data.teacher_embeddings = f'(aot: teacher vectors of {teacher_dim} dims)'  # shapes only, never read
  run = Experiment.from_config(config, devices=devices)  # refuses a config that does not fit the topology
  mesh = run.mesh
  rng = jax.random.key(config.seed)
  abstract_rng = jax.ShapeDtypeStruct(rng.shape, rng.dtype)
  batch = abstract_batch(config, teacher_dim)
  row = {
      'config': name, 'model': config.model.name, 'objective': ' + '.join(
          (config.objective.name, *config.objective.terms)),
      'topology': topology, 'device_kind': devices[0].device_kind, 'chips': len(devices),
      'mesh': dict(mesh.shape), 'global_batch': config.batch_size,
      'micro_batch': config.accumulation.micro_batch_size if config.accumulation.mode != 'none' else None,
      'accumulation': config.accumulation.mode, 'dtype': config.model.dtype,
      'remat': bool(config.model.get('remat', False)) and config.model.get('remat_policy', 'nothing_saveable'),
      'scan_layers': bool(config.model.get('scan_layers', False)),
      'params_millions': round(run.parameter_count / 1e6, 2),
      # as configured: 'auto' resolves by the tracing host's backend, the CPU here ('xla'), not the TPU's 'pallas'
      'attention': config.model.get('attention', 'auto'),
  }
  hbm = chip['hbm_gib'] * 2**30
  began = time.perf_counter()
  try:
    with jax.set_mesh(mesh):
      compiled = run.traced_step(batch, abstract_rng).lower().compile()
  except jax.errors.JaxRuntimeError as error:
    needed = out_of_memory(str(error))
    if needed is None:
      raise
    return {**row, 'compile_seconds': round(time.perf_counter() - began, 1), 'fits': False,
            'hbm_per_chip': {'temporaries_gib': round(needed[0] / 2**30, 2), 'chip_gib': chip['hbm_gib'],
                             'available_gib': round(needed[1] / 2**30, 2)},
            'advice': (f'the TPU compiler stops: the temporaries alone need {needed[0] / 2**30:.1f} GiB per chip, '
                       f'{needed[1] / 2**30:.1f} GiB are available; try: ' + '; '.join(fit_advice(config, chip)))}
  compile_seconds = time.perf_counter() - began
  memory = compiled.memory_analysis()
  args, out, alias, temp = (int(memory.argument_size_in_bytes), int(memory.output_size_in_bytes),
                            int(memory.alias_size_in_bytes), int(memory.temp_size_in_bytes))
  total = args + out - alias + temp
  cost = program_cost(compiled)
  flops, hbm_traffic = cost.get('flops', 0.0), cost.get('bytes accessed', 0.0)
  if config.model.get('scan_layers', False):
    # The cost analysis counts the layer loop's body once: add the left-out blocks' FLOPs (training/step.py), and
    # scale the HBM traffic as the lowered programs' traffic scales (an estimate: fusion changes traffic). The TPU
    # lowering has no cost analysis here, so both programs are lowered for one CPU device (whole-program counts).
    cpu = Experiment.from_config(config, parallel.make_mesh(1, jax.devices('cpu')[:1]), validate=False)  # checked
    with jax.set_mesh(cpu.mesh):
      scanned = program_cost(cpu.traced_step(batch, abstract_rng).lower())
    unrolled = cpu.unrolled_flops.lowered_cost(batch, abstract_rng)
    flops += max(unrolled.get('flops', 0.0) - scanned.get('flops', 0.0), 0.0) / len(devices)
    if scanned.get('bytes accessed'):
      hbm_traffic *= unrolled.get('bytes accessed', 0.0) / scanned['bytes accessed']
  num_micro = run.num_micro
  if num_micro > 1:  # the cost analysis counts a loop body once; nearly all the work is in the micro-batch loops
    flops, hbm_traffic = flops * num_micro, hbm_traffic * num_micro
  hlo = compiled.as_text()
  roofline = max(flops / chip['bf16_flops'], hbm_traffic / chip['hbm_bytes_per_sec'])
  row.update({
      'compile_seconds': round(compile_seconds, 1),
      'hbm_per_chip': {'arguments_gib': round(args / 2**30, 3), 'temporaries_gib': round(temp / 2**30, 3),
                       'total_gib': round(total / 2**30, 3), 'fraction_of_chip': round(total / hbm, 3),
                       'chip_gib': chip['hbm_gib']},
      'fits': total <= hbm,
      'flops_per_chip': flops, 'hbm_bytes_per_chip': hbm_traffic,
      'cost_scaled_by_micro_batches': num_micro,
      'collective_bytes_per_chip': {k: v for k, v in collective_bytes(hlo).items() if v},
      'bxb_arrays': bxb_arrays(hlo, config.batch_size, frozenset(
          tuple(sorted(x.shape)) for x in jax.tree.leaves(run.state_shapes))),
      'roofline_estimate': {
          'step_seconds': round(roofline, 4),
          'mfu': round(flops / (roofline * chip['bf16_flops']), 3) if roofline else None,
          'samples_per_sec': round(config.batch_size / roofline, 1) if roofline else None,
          # the TPU compiler's own estimate, where it gives a usable one (it reports negative values for some steps)
          'xla_optimal_seconds': cost['optimal_seconds'] if cost.get('optimal_seconds', -1) > 0 else None,
          'basis': f'max(FLOPs / {chip["bf16_flops"] / 1e12:.0f} TFLOP/s, HBM bytes / '
                   f'{chip["hbm_bytes_per_sec"] / 1e9:.0f} GB/s) per chip; collectives not included'},
  })
  if not row['fits']:
    row['advice'] = (f'needs {total / 2**30:.1f} GiB per chip, the chip has {chip["hbm_gib"]} GiB; try: '
                     + '; '.join(fit_advice(config, chip)))
  return row


def define_flags() -> None:
  config_lib.define_config_flag()
  flags.DEFINE_list('topology', ['v5e:4x4'], 'TPU topologies, e.g. v5e:4x4,v5p:4x4x4 (chips: ' +
                    ', '.join(sorted(CHIPS)) + ').')
  flags.DEFINE_integer('teacher_dim', 512, "Width of SaCo's pre-extracted mimic targets (512: a ViT-B/32 teacher).")
  flags.mark_flags_as_required(['config'])


def main(argv):
  del argv
  config = flags.FLAGS.config
  name = os.path.splitext(os.path.basename(flags.FLAGS['config'].config_filename))[0]
  for topology in flags.FLAGS.topology:
    row = compile_for(config, topology, flags.FLAGS.teacher_dim, name)
    print(json.dumps(row), flush=True)


if __name__ == '__main__':
  define_flags()
  app.run(main)
