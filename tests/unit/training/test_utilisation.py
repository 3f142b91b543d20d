"""Model FLOPs utilisation: the published peaks of vlp_jax/hardware.py by device kind, `perf/mfu` in the progress
figures (training/progress.py), its override config.log.peak_device_tflops, and benchmarks/aot.py reading the same
table."""
import pytest

from benchmarks import aot
from vlp_jax import config as config_lib
from vlp_jax import hardware
from vlp_jax.errors import ConfigError
from vlp_jax.training.progress import Progress, progress_line


@pytest.mark.parametrize('device_kind, peak', [
    ('TPU v4', 275e12),
    ('TPU v5 lite', 197e12),  # v5e
    ('TPU v5', 459e12),  # v5p, as older libtpu names it
    ('TPU v5p', 459e12),
    ('TPU v6 lite', 918e12),  # v6e
    ('NVIDIA H100 80GB HBM3', 989e12),  # SXM
    ('NVIDIA H100 PCIe', 756e12),
    ('NVIDIA H100 NVL', 835e12),
    ('NVIDIA H200', 989e12),
    ('NVIDIA GH200 480GB', 989e12),
    ('NVIDIA A100-SXM4-80GB', 312e12),
    ('NVIDIA A100-PCIE-40GB', 312e12),
    ('NVIDIA L4', 121e12),  # dense: 242 is with sparsity
    ('nvidia h100 80gb hbm3', 989e12),  # case and separators do not matter
    ('cpu', None),
    ('TPU v4 lite', None),  # v4i, another chip than v4: no prefix match
    ('TPU v3', None),
    ('NVIDIA L40S', None),  # not an L4
    ('NVIDIA GeForce RTX 4090', None),
])
def test_the_peak_of_each_device_kind(device_kind, peak):
  assert hardware.peak_flops(device_kind) == peak


def test_the_override_replaces_the_looked_up_peak():
  assert hardware.peak_device_flops('cpu') is None
  assert hardware.peak_device_flops('cpu', 0.0) is None
  assert hardware.peak_device_flops('cpu', 2.5) == 2.5e12
  assert hardware.peak_device_flops('NVIDIA H100 80GB HBM3', 0.0) == 989e12
  assert hardware.peak_device_flops('NVIDIA H100 80GB HBM3', 495) == 495e12  # e.g. an fp32 (TF32) peak


def test_utilisation_gives_the_mfu_against_the_peak():
  """perf/mfu counts the architecture's FLOPs, perf/mfu_executed the step's own; perf/step_flops stays executed."""
  device_flops, architecture_flops, peak = 3e12, 3.2e12, 50e12
  progress = Progress(total_steps=10, batch_size=4, start_step=0, device_flops=device_flops, devices=8,
                      peak_flops=peak, architecture_flops=architecture_flops)
  steps_per_sec = 2.5
  got = progress.utilisation(steps_per_sec)
  assert got['perf/mfu'] == pytest.approx(architecture_flops * steps_per_sec / peak, rel=1e-12)  # 0.16
  assert got['perf/mfu_executed'] == pytest.approx(device_flops * steps_per_sec / peak, rel=1e-12)  # 0.15
  assert got['perf/device_tflops_per_sec'] == pytest.approx(7.5)
  assert got['perf/step_flops'] == 8 * device_flops
  # Through tick: 4 steps in about 2 seconds.
  progress.last_time -= 2.0
  logged = progress.tick(4)
  assert logged['perf/mfu'] == pytest.approx(architecture_flops * logged['perf/steps_per_sec'] / peak, rel=1e-12)
  # about 2 s: the wall clock also runs between the two lines above, by milliseconds on a loaded machine
  assert logged['perf/mfu_executed'] == pytest.approx(3e12 * 2 / 50e12, rel=2e-2)


def test_no_mfu_without_a_peak_or_without_flops():
  assert 'perf/mfu' not in Progress(10, 4, 0, device_flops=3e12, devices=1).utilisation(2.0)
  assert 'perf/mfu_executed' not in Progress(10, 4, 0, device_flops=3e12, architecture_flops=3e12).utilisation(2.0)
  no_architecture = Progress(10, 4, 0, device_flops=3e12, peak_flops=1e13).utilisation(2.0)
  assert 'perf/mfu' not in no_architecture and no_architecture['perf/mfu_executed'] == pytest.approx(0.6)
  assert Progress(10, 4, 0, device_flops=None, peak_flops=1e12).utilisation(2.0) == {}


def test_the_progress_line_shows_the_mfu_when_known():
  metrics = {'train/loss': 3.42219, 'perf/samples_per_sec': 190.14, 'perf/eta_seconds': 3725.2}
  assert progress_line(4, 6, {**metrics, 'perf/mfu': 0.41349}) == (
      'step 4/6 | loss 3.4222 | 190.1 samples/s | ETA 1h02m05s | MFU 41.3%')
  assert progress_line(4, 6, metrics) == 'step 4/6 | loss 3.4222 | 190.1 samples/s | ETA 1h02m05s'


def test_peak_device_tflops_is_validated():
  config = config_lib.base_config()
  assert config.log.peak_device_tflops == 0.0  # look the device up
  config.log.peak_device_tflops = 989
  config_lib.validate(config)
  for bad in (-1.0, float('nan'), float('inf')):
    config.log.peak_device_tflops = bad
    with pytest.raises(ConfigError, match=r'config\.log\.peak_device_tflops'):
      config_lib.validate(config)


def test_aot_reads_the_same_chip_figures():
  assert sorted(aot.CHIPS) == ['v4', 'v5e', 'v5p', 'v6e']
  assert aot.chip_of('v5e:4x4') == {'chip': 'v5e', 'chips': 16, 'hbm_gib': 16, 'bf16_flops': 197e12,
                                    'hbm_bytes_per_sec': 819e9}
  assert aot.chip_of('v5p:4x4x4') == {'chip': 'v5p', 'chips': 64, 'hbm_gib': 95, 'bf16_flops': 459e12,
                                      'hbm_bytes_per_sec': 2765e9}
  assert {name: chip['bf16_flops'] for name, chip in aot.CHIPS.items()} == {
      'v4': 275e12, 'v5e': 197e12, 'v5p': 459e12, 'v6e': 918e12}
  assert {name: (chip['hbm_gib'], chip['hbm_bytes_per_sec']) for name, chip in aot.CHIPS.items()} == {
      'v4': (32, 1228e9), 'v5e': (16, 819e9), 'v5p': (95, 2765e9), 'v6e': (32, 1640e9)}
  # The device kind libtpu gives a v5e topology ('TPU v5 lite') finds the same chip in the trainer's lookup.
  assert hardware.accelerator_of('TPU v5 lite') is hardware.ACCELERATORS['v5e']
