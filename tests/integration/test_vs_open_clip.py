"""benchmarks/vs_open_clip.py: both sides train the same network on the same batch, each in its own process by
default, in alternating order (its figures are measured by hand, not asserted on timings here)."""
import numpy as np
import pytest

from benchmarks.vs_open_clip import (
    KINDS, batch_digest, device_kernel_kind, jax_step_flops, kernel_name_kind, kernel_name_table, open_clip_sides,
    parse_rows, profile_table, round_order, row_spec, shared_batch, sum_by_kind, summary, torch_settings, torch_side,
    work_fields)
from support import MICRO_CONFIG, import_open_clip_module


# The subprocess run of the script (both sides on one batch, isolated workers, alternating rounds) is the
# vs_open_clip stage of benchmarks/gpu.sh's dry run: tests/integration/test_benchmarks.py::test_gpu_script_dry_run.


def test_rows_alternate_which_side_goes_first():
  assert [round_order(i) for i in range(4)] == [('vlp_jax', 'open_clip'), ('open_clip', 'vlp_jax')] * 2


def test_several_compile_modes_alternate_with_vlp_jax():
  assert open_clip_sides(['default']) == ['open_clip']
  names = ['vlp_jax', *open_clip_sides(['default', 'max-autotune'])]
  assert names == ['vlp_jax', 'open_clip:default', 'open_clip:max-autotune']
  assert [round_order(i, names)[0] for i in range(2)] == ['vlp_jax', 'open_clip:max-autotune']


def test_open_clip_runs_at_its_best_on_cuda():
  """Fused AdamW and channels-last on a GPU, torch's defaults on the CPU; the compile mode is recorded."""
  gpu = torch_settings({'device': 'gpu', 'torch_compile': 'inductor', 'torch_compile_mode': 'max-autotune'})
  assert gpu == {'optimizer': 'AdamW(fused=True)', 'channels_last': True, 'torch_compile': 'inductor',
                 'torch_compile_mode': 'max-autotune'}
  cpu = torch_settings({'device': 'cpu', 'torch_compile': ''})
  assert (cpu['optimizer'], cpu['channels_last'], cpu['torch_compile_mode']) == ('AdamW(foreach)', False, '')


@pytest.mark.slow  # builds and runs an open_clip step
def test_open_clips_settings_reach_its_step(monkeypatch):
  """The GPU's settings, given on the CPU (torch has a fused CPU AdamW too): the optimizer is fused, the images and
  the patch convolution channels-last, the model compiled (the eager backend: dynamo without code generation)."""
  import torch
  import benchmarks.vs_open_clip as vs
  gpu = torch_settings({'device': 'gpu', 'torch_compile': 'eager', 'torch_compile_mode': 'reduce-overhead'})
  monkeypatch.setattr(vs, 'torch_settings', lambda spec: gpu)
  spec = {**row_spec('tiny', 2, 'fp32', 'cpu', 'eager', model_config=MICRO_CONFIG),
          'torch_compile_mode': 'reduce-overhead'}
  step, _, _ = torch_side(spec, (import_open_clip_module('model'), import_open_clip_module('loss')))
  step()
  assert step.optimizer.defaults['fused'] is True
  assert step.images.is_contiguous(memory_format=torch.channels_last)
  assert step.model.visual.conv1.weight.is_contiguous(memory_format=torch.channels_last)
  assert isinstance(step.model, torch._dynamo.eval_frame.OptimizedModule)


def _block_flops(rows: int, width: int, pooled: bool) -> int:
  """Forward FLOPs of one transformer block over `rows` rows (MLP 4x wide): the qkv projection of every row, and
  attention, output projection and MLP of every row or (pooled) of one query row."""
  queries = 1 if pooled else rows
  return 2 * rows * width * 3 * width + queries * (4 * rows * width + 2 * width * width + 2 * 2 * width * 4 * width)


@pytest.mark.slow  # traces vlp_jax's step, runs an open_clip step
def test_both_sides_flops_per_step_match_a_hand_count():
  """The micro shapes (tests/support.py: 16 px images of 4 px patches, 17 rows and 16 tokens, width 32, one block
  per tower, embed 32), batch 4: forward FLOPs x 3 for the backward's two products, except the patch embedding's
  (no gradient for the images: x 2). vlp_jax's last block computes the pooled row alone and its loss one logit
  matrix; open_clip computes every row and two logit matrices."""
  batch, width, patch_flops = 4, 32, 2 * 16 * (4 * 4 * 3) * 32
  heads = 2 * width * 32 * 2  # the two towers' projections into the joint space

  def step(pooled: bool, logit_matrices: int) -> int:
    forward = batch * (patch_flops + _block_flops(17, width, pooled) + _block_flops(16, width, pooled) + heads)
    forward += logit_matrices * 2 * batch * batch * 32
    return 3 * forward - batch * patch_flops

  spec = row_spec('tiny', batch, 'fp32', 'cpu', model_config=MICRO_CONFIG)
  assert jax_step_flops(spec) == step(pooled=True, logit_matrices=1)
  modules = import_open_clip_module('model'), import_open_clip_module('loss')
  _, _, torch_flops = torch_side(spec, modules)
  assert torch_flops == step(pooled=False, logit_matrices=2)
  fields = work_fields({'flops_per_step': 10.0}, {'flops_per_step': 40.0},
                       {'vlp_jax_samples_per_sec': 8.0, 'open_clip_samples_per_sec': 4.0}, batch_size=4)
  assert (fields['vlp_jax_flops_per_sec'], fields['open_clip_flops_per_sec']) == (20.0, 40.0)
  assert (fields['flops_per_step_ratio'], fields['flops_per_sec_ratio']) == (0.25, 0.5)


def test_summary_pairs_each_round_of_the_two_sides():
  result = summary({'vlp_jax': [10.0, 30.0, 20.0], 'open_clip': [20.0, 10.0, 20.0]})
  assert result['ratio'] == 1.0  # medians 20 and 20
  assert result['pair_ratios'] == [0.5, 3.0, 1.0]
  assert (result['pair_ratio_median'], result['pair_ratio_min'], result['pair_ratio_max']) == (1.0, 0.5, 3.0)


def test_shared_batch_is_the_same_arrays_with_the_tokenizer_layout():
  spec = {'batch_size': 3, 'image_size': 8, 'context_length': 10, 'vocab_size': 100}
  batch = shared_batch(spec)
  assert batch['image'].shape == (3, 8, 8, 3) and batch['image'].dtype == np.float32
  assert batch_digest(shared_batch(spec)) == batch_digest(batch)  # what each worker builds on its own
  text = batch['text']
  assert text.shape == (3, 10) and text.dtype == np.int32
  assert (text[:, 0] == 98).all() and (text[:, 5] == 99).all() and (text[:, 6:] == 0).all()
  assert (text.argmax(-1) == 5).all()  # both towers pool the end token, the highest id
  assert ((text[:, 1:5] >= 1) & (text[:, 1:5] < 98)).all()


def test_vs_open_clip_rejects_a_bad_row():
  assert parse_rows(['tiny:128', 'ViT-B-32:32']) == [('tiny', 128), ('ViT-B-32', 32)]
  for bad in ('tiny', 'ViT-Q-7:32', 'tiny:0', 'tiny:x'):
    with pytest.raises(ValueError, match='--rows'):
      parse_rows([bad])


def test_gpu_kernels_are_sorted_into_the_profiles_kinds():
  """On a GPU both profiles are kernel times; torch's kernels (and jax's that name no HLO op) go by their names."""
  expected = {
      'nvjet_tst_128x256_64x4_2x1_v_bz_TNT': KINDS[0], 'sm90_xmma_gemm_bf16bf16_bf16f32': KINDS[0],
      'pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>': KINDS[1],
      'cudnn_generated_fort_native_sdpa_sm90_flash_fprop': KINDS[1],
      'triton_poi_fused_gelu_gelu_backward_7': KINDS[2], 'triton_red_fused_native_layer_norm_12': KINDS[3],
      'void at::native::indexing_backward_kernel<float>': KINDS[4],
      'triton_per_fused__log_softmax_nll_loss_3': KINDS[7],
      'void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>': KINDS[7],
      'Memcpy DtoD (Device -> Device)': KINDS[6], 'triton_poi_fused_add_mul_5': KINDS[5],
  }
  assert {name: device_kernel_kind(name) for name in expected} == expected
  kinds, top = sum_by_kind([('gemm_a', KINDS[0], 6.0), ('gemm_a', KINDS[0], 2.0), ('add', KINDS[5], 1.0)], steps=2)
  assert kinds == {KINDS[0]: 4.0, KINDS[5]: 0.5}
  assert top == [(4.0, 'gemm_a', KINDS[0]), (0.5, 'add', KINDS[5])]


def test_matmul_kernels_count_as_matmul_whatever_hlo_op_runs_them():
  """The profile's second table: a cuBLAS/cuBLASLt/CUTLASS/Triton GEMM kernel that XLA filed under a fused GELU or
  a cast is matmul time; fused attention stays attention; any other kernel keeps its HLO op's kind."""
  gelu, other = KINDS[2], KINDS[5]
  expected = {
      ('nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN', gelu): KINDS[0],
      ('sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel'
       '__5x_cublas', gelu): KINDS[0],
      ('void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>', other): KINDS[0],
      ('cutlass3x_sm90_tensorop_h64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized'
       '_cooperative_epi_tma', KINDS[6]): KINDS[0],
      ('gemm_fusion_dot_general_43', gelu): KINDS[0],
      ('sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64', other): KINDS[0],
      ('cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0', KINDS[0]): KINDS[1],
      ('loop_gelu_fusion_12', gelu): gelu,
      ('input_reduce_fusion_3', KINDS[3]): KINDS[3],
      ('loop_convert_fusion_7', other): other,
  }
  assert {key: kernel_name_kind(*key) for key in expected} == expected
  table = kernel_name_table({KINDS[0]: 26.7, KINDS[2]: 18.0}, {KINDS[0]: 40.7, KINDS[2]: 4.0}, {KINDS[0]: 45.0})
  matmul, _, gelu_row = table.splitlines()[2:5]
  assert [c.strip() for c in matmul.split('|')[2:6]] == ['26.7', '40.7', '+14.0', '45.0']
  assert [c.strip() for c in gelu_row.split('|')[2:5]] == ['18.0', '4.0', '-14.0']
  assert table.splitlines()[-1].split('|')[2:4] == [' 44.7 ', ' 44.7 ']


def test_profile_table_on_a_gpu_shows_the_idle_time_and_does_not_rescale():
  jax_kinds, torch_kinds = {KINDS[0]: 60.0, KINDS[1]: 20.0}, {KINDS[0]: 70.0, KINDS[1]: 10.0}
  gpu = profile_table(jax_kinds, torch_kinds, 90.0, 100.0, device_clock=True).splitlines()
  assert gpu[2].split('|')[3].strip() == '60.0' and gpu[2].split('|')[5].strip() == '70.0'
  assert [cell.strip() for cell in gpu[-2].split('|')[1:-1]] == ['GPU idle: no kernel running', '', '10.0', '',
                                                                  '20.0']
  cpu = profile_table(jax_kinds, torch_kinds, 90.0, 100.0).splitlines()
  assert cpu[2].split('|')[3].strip() == f'{60 / 80 * 90:.1f}' and not any('idle' in line for line in cpu)
