"""benchmarks/aot.py: the real train step compiled for a TPU topology by libtpu, on this CPU."""
import importlib.util

import pytest

from benchmarks import aot, aot_table


def test_collective_bytes_and_bxb_arrays_read_hlo_text():
  hlo = '\n'.join([
      '  %all-reduce-start.1 = f32[512,512]{1,0} all-reduce-start(f32[512,512]{1,0} %p), to_apply=%add',
      '  %all-reduce-done.1 = f32[512,512]{1,0} all-reduce-done(f32[512,512]{1,0} %all-reduce-start.1)',
      '  ROOT all-gather.2 = (bf16[64,128]{1,0}, s32[4]{0}) all-gather(bf16[16,128]{1,0} a, s32[1]{0} b), '
      'dimensions={0}',
      '  %fusion.3 = f32[256,1024]{1,0} fusion(f32[256,64]{1,0} %x), kind=kLoop',
      '  %dot.4 = f32[1024,1024]{1,0} dot(f32[1024,64]{1,0} %x, f32[64,1024]{1,0} %y)',
  ])
  got = aot.collective_bytes(hlo)
  assert got['all-reduce'] == 512 * 512 * 4  # the -start is not counted a second time
  assert got['all-gather'] == 64 * 128 * 2 + 4 * 4
  assert got['reduce-scatter'] == 0
  assert aot.bxb_arrays(hlo, 1024) == 1  # the [1024, 1024] dot; [256, 1024] is a row shard
  assert aot.bxb_arrays(hlo, 2048) == 0
  assert aot.bxb_arrays(hlo, 1024, frozenset({(1024, 1024)})) == 0  # a weight of that shape is not a logit matrix


def test_out_of_memory_reads_the_compilers_figures():
  message = ('RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (21.86G) '
             'exceeds available HBM (15.75G).')
  assert aot.out_of_memory(message) == pytest.approx((21.86 * 2**30, 15.75 * 2**30))
  assert aot.out_of_memory('INTERNAL: something else') is None


def test_chip_of_names_the_valid_chips():
  assert aot.chip_of('v5p:4x4x4')['chips'] == 64
  with pytest.raises(ValueError, match=r"--topology='v9:4x4'.*valid chips: \['v4', 'v5e', 'v5p', 'v6e'\]"):
    aot.chip_of('v9:4x4')


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                    reason='libtpu is not installed (pip install -e ".[tpu]")')
def test_micro_config_compiles_for_v5e_2x2(micro):
  micro.batch_size = 64  # above every model dimension, so that a [B, B] array could not be mistaken
  row = aot.compile_for(micro, 'v5e:2x2', name='micro')
  assert row['device_kind'] == 'TPU v5 lite' and row['chips'] == 4 and row['mesh'] == {'data': 4, 'fsdp': 1}
  assert row['fits'] and 0 < row['hbm_per_chip']['total_gib'] < 1
  assert row['flops_per_chip'] > 0 and row['roofline_estimate']['step_seconds'] > 0
  # Replicated parameters: their gradients are summed over the chips.
  assert row['collective_bytes_per_chip']['all-reduce'] > 0
  assert row['bxb_arrays'] == 0  # the logits are row-sharded: [B / 4, B] per chip
  # FSDP over the 4 chips: the parameters are gathered and their gradients scattered instead.
  micro.mesh.update(fsdp=4, fsdp_min_size=1024)
  fsdp = aot.compile_for(micro, 'v5e:2x2', name='micro')
  assert fsdp['mesh'] == {'data': 1, 'fsdp': 4}
  assert fsdp['hbm_per_chip']['arguments_gib'] < row['hbm_per_chip']['arguments_gib']
  assert fsdp['collective_bytes_per_chip'].get('all-gather', 0) > row['collective_bytes_per_chip'].get(
      'all-gather', 0)


def test_aot_table_renders_a_fitting_and_a_refused_row():
  fits = {'config': 'clip_cc3m', 'topology': 'v5e:4x4', 'chips': 16, 'model': 'ViT-B-32', 'dtype': 'bfloat16',
          'global_batch': 2048, 'micro_batch': None, 'scan_layers': True, 'remat': 'nothing_saveable',
          'hbm_per_chip': {'arguments_gib': 1.709, 'temporaries_gib': 1.48, 'total_gib': 3.19, 'fraction_of_chip': 0.2,
                           'chip_gib': 16},
          'fits': True, 'flops_per_chip': 6.5e12, 'collective_bytes_per_chip': {'all-reduce': 1.02e8},
          'roofline_estimate': {'step_seconds': 0.1604, 'mfu': 0.212, 'samples_per_sec': 12824.2},
          'compile_seconds': 211.6}
  refused = {**fits, 'config': 'slip_cc3m', 'scan_layers': False, 'remat': False, 'micro_batch': 512, 'fits': False,
             'hbm_per_chip': {'temporaries_gib': 18.44, 'available_gib': 15.75}, 'flops_per_chip': None,
             'collective_bytes_per_chip': {}, 'roofline_estimate': None, 'compile_seconds': 29.2}
  header, rule, *rows = aot_table.table([fits, refused]).splitlines()
  assert header.count('|') == rule.count('|') == rows[0].count('|') == rows[1].count('|') == 12
  assert rows[0] == ('| `clip_cc3m` | v5e:4x4 (16) | ViT-B-32, bf16 | 2048 | scan, remat nothing_saveable | '
                     '1.71 / 1.48 / 3.19 (20% of 16) | yes | 6.5 | all-reduce 102 | 0.160 / 0.21 / 12824 | 212 |')
  assert rows[1] == ('| `slip_cc3m` | v5e:4x4 (16) | ViT-B-32, bf16 | 2048 (512) | unrolled, remat none | '
                     'temporaries alone 18.4 > 15.8 available | **no** | - | - | - | 29 |')
