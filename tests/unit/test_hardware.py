"""The backend report `python -m vlp_jax.main` prints at start: accelerator detection and the warnings."""
import pytest

from vlp_jax import hardware

NO_NVIDIA_SMI = lambda name: None  # noqa: E731


def _dev(tmp_path, *entries):
  """A fake /dev with the given entries ('vfio/0' makes a directory)."""
  dev = tmp_path / 'dev'
  dev.mkdir(parents=True)
  for entry in entries:
    path = dev / entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
  return str(dev)


def test_visible_accelerators_from_device_nodes(tmp_path):
  assert hardware.visible_accelerators(_dev(tmp_path / 'a', 'null', 'tty0', 'vfio/vfio'), NO_NVIDIA_SMI) == {}
  assert set(hardware.visible_accelerators(_dev(tmp_path / 'b', 'nvidia0', 'nvidiactl'), NO_NVIDIA_SMI)) == {'gpu'}
  assert set(hardware.visible_accelerators(_dev(tmp_path / 'c', 'accel0', 'accel1'), NO_NVIDIA_SMI)) == {'tpu'}
  assert set(hardware.visible_accelerators(_dev(tmp_path / 'd', 'vfio/vfio', 'vfio/0'), NO_NVIDIA_SMI)) == {'tpu'}
  on_path = hardware.visible_accelerators(_dev(tmp_path / 'e'), lambda name: f'/usr/bin/{name}')
  assert on_path == {'gpu': 'nvidia-smi is on PATH'}
  assert hardware.visible_accelerators(str(tmp_path / 'missing'), NO_NVIDIA_SMI) == {}


def test_no_warnings_when_jax_uses_the_accelerator_or_a_plain_cpu_run():
  assert hardware.backend_warnings('gpu', 8, 'bfloat16', 4, {'gpu': 'nvidia-smi is on PATH'}) == []
  assert hardware.backend_warnings('tpu', 4, 'bfloat16', 2, {'tpu': '/dev/accel0 exists'}) == []
  assert hardware.backend_warnings('cpu', 1, 'float32', 1, {}) == []


@pytest.mark.parametrize('dtype,fsdp,visible,expected', [
    ('bfloat16', 1, {}, ["config.model.dtype='bfloat16'"]),
    ('float32', 4, {}, ['config.mesh.fsdp=4']),
    ('float32', 1, {'gpu': '/dev/nvidia0 exists'}, ['GPU is visible (/dev/nvidia0 exists)', '".[cuda12]"']),
    ('float32', 1, {'tpu': '/dev/accel0 exists'}, ['TPU is visible (/dev/accel0 exists)', '".[tpu]"']),
])
def test_each_problem_gives_one_line(dtype, fsdp, visible, expected):
  warnings = hardware.backend_warnings('cpu', 1, dtype, fsdp, visible)
  assert len(warnings) == 1 and '\n' not in warnings[0]
  for text in expected:
    assert text in warnings[0]


def test_all_problems_are_reported_together():
  warnings = hardware.backend_warnings('cpu', 2, 'bfloat16', 2, {'gpu': 'nvidia-smi is on PATH'})
  assert len(warnings) == 3
  assert 'CPU (2 devices)' in warnings[1]


def test_startup_lines_start_with_the_backend():
  assert hardware.startup_lines('gpu', 8, 2, 'float32', 1, {})[0] == 'jax backend: gpu, 8 devices over 2 processes'
  lines = hardware.startup_lines('cpu', 1, 1, 'bfloat16', 1, {})
  assert lines[0] == 'jax backend: cpu, 1 device' and len(lines) == 2
