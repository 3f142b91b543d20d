"""The benchmark scripts run end to end on the micro config (their figures are measured by hand, not asserted on
timings here)."""
from support import FAST_COMPILE_XLA_FLAGS, MICRO_CONFIG, ROOT
import jax
import pytest
import json
import os
import subprocess
import sys

from benchmarks.common import alternating_order
from benchmarks.vs_open_clip import spec_config
from vlp_jax import models, objectives

CONFIG = MICRO_CONFIG


def _run(script, data_cache, *args):
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', script), f'--config={CONFIG}', *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  return [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]


@pytest.mark.slow
def test_accumulation_benchmark(data_cache):
  rows = _run('accumulation.py', data_cache, '--batches=64,1024', '--micro_batch=32', '--loss_batch=64')
  table = [r for r in rows if 'mode' in r]
  assert [(r['mode'], r['effective_batch'], r['micro_batch']) for r in table] == [
      ('none', 64, 64), ('decoupled', 64, 32), ('none', 1024, 1024), ('decoupled', 1024, 32)]
  assert all(r['peak_bytes'] > 0 for r in table)
  growth = next(r for r in rows if r.get('section') == 'growth')
  assert growth['decoupled_growth'] < growth['none_growth']
  loss = next(r for r in rows if r.get('section') == 'sharded_loss')
  assert loss['devices'] == 8 and [8, 64] in loss['logit_shapes_per_device'] and not loss['holds_a_full_matrix']


@pytest.mark.slow
def test_data_benchmark(tmp_path):
  env = {**os.environ}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'data.py'), '--examples=48', '--side=48',
                           '--image_size=32', '--batch_size=8', '--batches=2', '--workers=0,1',
                           '--pipelines=clip,cosmos,cosmos_device', '--device_source_size=40', '--profile',
                           f'--cache_dir={tmp_path}'],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]
  timed = [r for r in rows if 'samples_per_sec' in r]
  # Both formats, back to back for each pipeline and worker count (the same images: the tars are written from the
  # ArrayRecord shards), and the per-core ratio of each pair.
  assert [(r['pipeline'], r['workers'], r['format']) for r in timed] == [
      (p, w, f) for p in ('clip', 'cosmos', 'cosmos_device') for w in (0, 1) for f in ('array_record', 'webdataset')]
  assert all(r['samples_per_sec'] > 0 and r['samples_per_cpu_sec'] > 0 for r in timed)
  ratios = [r for r in rows if 'webdataset_over_array_record_per_core' in r]
  assert [(r['pipeline'], r['workers']) for r in ratios] == [
      (p, w) for p in ('clip', 'cosmos', 'cosmos_device') for w in (0, 1)]
  assert {r['pipeline'] for r in rows if 'profile' in r} == {'clip', 'cosmos', 'cosmos_device'}


def _jsonl(path) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.startswith('{')]


# the XLA flag sets gpu.sh's levers stage times (its xla_levers), each a flag name XLA must know
def _xla_levers(autotune_cache) -> tuple[str, ...]:
  triton = f'--xla_gpu_enable_triton_gemm=true --xla_gpu_per_fusion_autotune_cache_dir={autotune_cache}'
  return ('--xla_gpu_enable_cublaslt=true', '--xla_gpu_enable_cudnn_layer_norm=true', triton,
          f'{triton} --xla_gpu_cudnn_gemm_fusion_level=2')


@pytest.mark.slow  # every stage of the GPU script on the CPU: ten processes, micro shapes
def test_gpu_script_dry_run(tmp_path, data_cache):
  """`bash benchmarks/gpu.sh --dry_run` runs every stage, each writing its JSON rows, so no GPU minute is lost to a
  typo; the rows carry what RESULTS.md reports."""
  pytest.importorskip('torch', reason='the vs_open_clip stage needs torch')
  # Unoptimised XLA (as the unit tests, conftest.UNOPTIMISED_FOLDERS): the dry run checks the rows each stage writes,
  # not their speeds, and its stages compile many programs to run each a few times (81 -> 58 CPU-s alone).
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache, 'XLA_FLAGS': FAST_COMPILE_XLA_FLAGS,
         'JAX_DISABLE_MOST_OPTIMIZATIONS': '1', 'GPU_SH_AUTOTUNE_CACHE': str(tmp_path / 'autotune')}
  env.pop('VLP_JAX_MALLOC', None)
  out = tmp_path / 'gpu'
  result = subprocess.run(['bash', os.path.join(ROOT, 'benchmarks', 'gpu.sh'), '--dry_run', str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  for name in ('b16', 'vs_open_clip', 'end_to_end', 'so400m', 'attention', 'levers_variants', 'levers_xla',
               'levers_patch_embedding', 'levers_embedding_grad'):
    assert f'== {name} exit 0' in result.stdout, (name, result.stdout[-3000:], result.stderr[-3000:])
  assert '== l14 skipped in the dry run' in result.stdout
  assert '== rival_autotune skipped in the dry run' in result.stdout
  assert 'jax' in (out / 'environment.txt').read_text()

  # b16: both attention routes the CPU runs, timed in the same alternating rounds
  xla, padded = _jsonl(out / 'b16.jsonl')
  assert (xla['attention'], padded['attention'], xla['precision']) == ('xla', 'padded', 'bf16')
  for row in (xla, padded):
    assert row['flops_per_step'] > 0 and row['samples_per_sec'] > 0 and len(row['round_step_seconds']) == 2
    # what `mfu` counts: the same model with every row through every block (no peak on a CPU: no MFU figures)
    assert row['architecture_flops_per_step'] > 0 and row['mfu'] is None and row['mfu_executed'] is None
  assert padded['speedup_vs_first']['first_attention'] == 'xla'
  ratios = [a / b for a, b in zip(xla['round_step_seconds'], padded['round_step_seconds'])]
  assert padded['speedup_vs_first']['min'] == pytest.approx(min(ratios), abs=2e-3)
  route = max((xla, padded), key=lambda r: r['samples_per_sec'])['attention']  # what the later stages use

  # vs_open_clip: open_clip through torch.compile and vlp_jax, isolated workers, the same network and batch
  rows = _jsonl(out / 'vs_open_clip.jsonl')
  if 'skipped' in rows[0]:
    pytest.skip(rows[0]['skipped'])
  # one row per torch.compile mode, each an open_clip worker timed in the same rounds against one vlp_jax worker
  row, graphed = rows
  assert (row['torch_compile_mode'], graphed['torch_compile_mode']) == ('default', 'reduce-overhead')
  assert row['round_rates']['vlp_jax'] == graphed['round_rates']['vlp_jax']
  assert row['sides']['open_clip']['pid'] != graphed['sides']['open_clip']['pid']
  # open_clip's settings (torch's defaults on the CPU) and both sides' FLOPs: vlp_jax's pooled last blocks do less
  assert row['sides']['open_clip']['optimizer'] == 'AdamW(foreach)' and not row['sides']['open_clip']['channels_last']
  assert 0 < row['vlp_jax_flops_per_step'] < row['open_clip_flops_per_step']
  assert row['flops_per_sec_ratio'] == pytest.approx(row['ratio'] * row['flops_per_step_ratio'], rel=2e-2)
  # the tiny preset with the micro shapes, on both sides (the parent checks that their parameter counts agree)
  config = spec_config('tiny', 8, 'fp32', model_config=MICRO_CONFIG)
  init = objectives.build(config, models.build_model(config.model)).init_variables
  parameters = sum(leaf.size for leaf in jax.tree.leaves(jax.eval_shape(init, jax.random.key(0))[0]))
  assert (row['model'], row['batch_size'], row['parameters'], row['mode']) == ('tiny', 8, parameters, 'isolated')
  assert row['model_config'] == 'tests/support.py' and parameters < 7_974_913  # not the preset's own shapes
  assert (row['torch_compile'], row['attention']) == ('eager', route)
  assert row['vlp_jax_samples_per_sec'] > 0 and row['open_clip_samples_per_sec'] > 0 and row['ratio'] > 0
  assert (row['rounds'], row['steps'], len(row['pair_ratios'])) == (2, 1, 2)
  assert row['pair_ratio_min'] <= row['pair_ratio_median'] <= row['pair_ratio_max']
  jax_side, torch_side = row['sides']['vlp_jax'], row['sides']['open_clip']
  assert jax_side['pid'] != torch_side['pid']
  if sys.platform == 'linux':  # the trainer's malloc on the vlp_jax side only
    assert jax_side['malloc'].startswith('one arena')
  assert torch_side['malloc'].startswith('glibc defaults') and torch_side['torch_threads'] >= 1
  # and (the profile stage's code on the CPU) where each side's step time goes, by op kind, side by side
  profile = (out / 'vs_open_clip.jsonl').read_text()
  assert '| op kind | vlp_jax profiled ms/step' in profile and '| **step** |' in profile
  assert 'vlp_jax costliest ops' in profile and 'open_clip costliest ops' in profile
  assert '| op kind | vlp_jax by HLO op ms/step | vlp_jax by kernel name ms/step |' in profile
  assert 'vlp_jax costliest kernels' in profile

  # end_to_end: the trainer read every step's batch from the JPEG tars; its rate against its step alone
  (row,) = _jsonl(out / 'end_to_end.jsonl')
  assert (row['shards'], row['samples_per_shard'], row['steps'], row['attention']) == (1, 32, 4, route)
  assert len(row['samples_per_sec']) == 2 and row['end_to_end_samples_per_sec'] > 0
  assert row['end_to_end_over_step_only'] == pytest.approx(row['end_to_end_samples_per_sec']
                                                          / row['step_only_samples_per_sec'], abs=2e-3)
  assert row['input_bound'] == (row['end_to_end_samples_per_sec'] < 0.9 * row['step_only_samples_per_sec'])
  assert all(0 <= f <= 1.5 for f in row['data_wait_fraction'])
  assert row['checkpoint_save_seconds'] > 0 and row['checkpoint_restore_seconds'] > 0
  assert row['checkpoint_bytes'] > 1e6  # the micro model's parameters and AdamW state
  assert len(list((out / 'end_to_end_data').glob('tars-*/*.tar'))) == 1

  # the larger models: a SigLIP step (sigmoid loss, its tokenizer), timed (l14's CLIP step is b16's at micro shapes)
  (row,) = _jsonl(out / 'so400m.jsonl')
  assert 'failed' not in row, row
  assert row['objective'] == 'siglip' and row['samples_per_sec'] > 0 and row['attention'] == route

  # levers: patch dropout under remat, in alternating rounds, and a run under every lever flag at once (XLA stops at
  # a flag it does not know), each on the route b16 chose
  dense, dropped = _jsonl(out / 'levers_variants.jsonl')  # CLIP with the SaCo term, remat on
  assert [(r['objective'], r['patch_dropout'], r['remat'], r['attention']) for r in (dense, dropped)] == [
      ('saco', 0.0, True, route), ('saco', 0.5, True, route)]
  for row in (dense, dropped):
    assert row['samples_per_sec'] > 0 and len(row['round_step_seconds']) == 2
    assert row['utilisation'] == round(row['achieved_flops_per_sec'] / row['peak_flops_per_sec'], 4)
  assert dropped['flops_per_step'] < dense['flops_per_step']  # half the image patches: fewer FLOPs
  ratios = [a / b for a, b in zip(dense['round_step_seconds'], dropped['round_step_seconds'])]
  speedup = dropped['speedup_vs_first']
  assert (speedup['min'], speedup['max']) == (pytest.approx(min(ratios), abs=2e-3), pytest.approx(max(ratios), abs=2e-3))
  assert (speedup['first_patch_dropout'], speedup['first_remat']) == (0.0, True) and 'speedup_vs_first' not in dense
  run, summary = _jsonl(out / 'levers_xla.jsonl')
  levers = ' '.join(_xla_levers(tmp_path / 'autotune'))
  assert run['xla_flags_variant'] == summary['xla_flags_variant'] == levers
  assert run['samples_per_sec'] > 0 and run['xla_flags'].endswith(levers)
  assert summary['samples_per_sec_median'] == run['samples_per_sec']
  # the patch embedding and the token table's gradient: each switch's values timed in alternating rounds
  for stage, key, values in (('levers_patch_embedding', 'patch_embedding', ['conv', 'matmul']),
                             ('levers_embedding_grad', 'embedding_grad', ['scatter', 'sorted', 'drop_after_eot'])):
    rows = _jsonl(out / f'{stage}.jsonl')
    assert [r[key] for r in rows] == values and all('failed' not in r for r in rows), rows
    assert all(r['samples_per_sec'] > 0 and len(r['round_step_seconds']) == 2 for r in rows)
    assert all(r['speedup_vs_first'][f'first_{key}'] == values[0] for r in rows[1:])

  # attention: each fused variant (padded to 64, to 2, unpadded with jax's rule fixed in that process) equals XLA in
  # values and gradients, odd and causal-even rows; each variant and torch's SDPA timed forward and backward
  rows = _jsonl(out / 'attention.jsonl')
  assert rows[0]['kind'] == 'setup' and rows[0]['cudnn_trains_odd_lengths_as_installed'] is False
  assert rows[0]['cudnn_trains_odd_lengths_patched'] is True  # the fix, in that process only
  checks = [r for r in rows if r['kind'] == 'check']
  assert sorted((r['length'], r['causal'], r['variant']) for r in checks) == sorted(
      (length, causal, v) for length, causal in ((17, False), (16, True)) for v in ('pad64', 'pad2', 'unpadded'))
  assert all(r['ok'] for r in checks), checks
  timed = [r for r in rows if r['kind'] == 'time']
  assert len(timed) == 2 * 2 * 5 and all(r['ms'] > 0 and len(r['round_ms']) == 2 for r in timed), timed


def test_gpu_script_refuses_an_unknown_stage_or_option(tmp_path):
  script = os.path.join(ROOT, 'benchmarks', 'gpu.sh')
  for args, expected in ((['--dry_run', str(tmp_path), 'b16 l15'], "unknown stage 'l15'"),
                         (['--dryrun'], "unknown option '--dryrun'")):
    result = subprocess.run(['bash', script, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and expected in result.stderr


def test_xla_flag_rounds_alternate_and_each_variant_is_compared_within_its_round():
  """benchmarks/xla_flags.py: the order reverses every round; a variant's ratio is taken against the first variant's
  run of the same round, and a failed run has no rate to compare."""
  sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
  from xla_flags import summarise
  assert alternating_order(['a', 'b', 'c'], 0) == ['a', 'b', 'c']
  assert alternating_order(['a', 'b', 'c'], 1) == ['c', 'b', 'a']
  rows = [{'xla_flags_variant': 'default', 'round': 0, 'index': 0, 'samples_per_sec': 100.0},
          {'xla_flags_variant': '--x', 'round': 0, 'index': 0, 'samples_per_sec': 110.0},
          {'xla_flags_variant': '--x', 'round': 1, 'index': 0, 'samples_per_sec': 99.0},
          {'xla_flags_variant': 'default', 'round': 1, 'index': 0, 'samples_per_sec': 90.0},
          {'xla_flags_variant': '--y', 'round': 0, 'index': 0, 'failed': 'exit 1: Unknown flag'}]
  default, x = summarise(rows, ['default', '--x', '--y'])
  assert (default['samples_per_sec_median'], 'ratio_vs_first' in default) == (95.0, False)
  assert x['round_samples_per_sec'] == [110.0, 99.0] and x['samples_per_sec_median'] == 104.5
  assert x['ratio_vs_first'] == {'median': 1.1, 'min': 1.1, 'max': 1.1, 'first': 'default'}


@pytest.mark.slow
def test_naflex_steps_benchmark(data_cache):
  """One row per train-step program (the square images, then each NaFlex length once) and per eval budget."""
  rows = _run('naflex_steps.py', data_cache, '--steps=1', '--config.model.vision.type=siglip_vit',
              '--config.objective.name=siglip2', '--config.objective.naflex_start_fraction=0.5',
              '--config.objective.distill_weight=0.0', '--config.objective.masked_weight=0.0',
              '--config.data.naflex.sequence_lengths=(4,16)', '--config.eval.naflex_max_patches=(9,)')
  train = [r for r in rows if r['program'] == 'train_step']
  assert [(r['sequence_length'], r['programs']) for r in train] == [(None, 1), (16, 2), (4, 3)]
  assert [r['max_patches'] for r in rows if r['program'] == 'eval_images'] == [9]
  assert all(r.get('step_s', r.get('batch_s', 0)) > 0 for r in rows)
