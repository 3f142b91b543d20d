"""The config as the commands see it, in their own processes: `--config.*` overrides reach keys the file does not
name, typos and bad values are reported before anything compiles, and `python -m vlp_jax.main` prints the backend
report before validating."""
import os
import subprocess
import sys

import pytest

from support import FAST_COMPILE_XLA_FLAGS, ROOT


@pytest.mark.slow
def test_command_line_typo_is_reported_before_compiling(tmp_path):
  env = {**os.environ, 'PYTHONPATH': ROOT}
  result = subprocess.run(
      [sys.executable, '-m', 'vlp_jax.main', '--config=configs/clip_shapes.py',
       f'--workdir={tmp_path}', '--config.optim.learnig_rate=0.1'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert result.returncode != 0
  assert 'learnig_rate' in result.stderr
  assert not (tmp_path / 'checkpoints').exists()


_PARSE_AND_VALIDATE = '''
import sys
from absl import flags
from vlp_jax import config as config_lib, errors, objectives
flag = config_lib.define_config_flag()
flags.FLAGS(sys.argv)
config = flag.value
try:
  config_lib.validate(config)
except errors.ConfigError as error:
  sys.exit(f'error: {error}')
print(repr(objectives.OBJECTIVES.get(config.objective.name).options(config.objective).text_augment_prob))
'''


@pytest.mark.slow  # three processes, each importing jax
@pytest.mark.parametrize('override, expected_out, expected_err', [
    # a key the file leaves at its default (zerovl_shapes.py does not name it): the override reaches the objective
    ('--config.objective.text_augment_prob=0.35', '0.35', None),
    # a typo of it: rejected, naming the key and the valid ones
    ('--config.objective.text_augment_prb=0.35', None, "'config.objective.text_augment_prb'; valid keys here: ["),
    # a new key of the wrong type
    ('--config.objective.text_augment_prob=high', None, 'config.objective.text_augment_prob has type str'),
])
def test_command_line_overrides_reach_keys_the_file_does_not_name(override, expected_out, expected_err):
  result = subprocess.run([sys.executable, '-c', _PARSE_AND_VALIDATE, '--config=configs/zerovl_shapes.py', override],
                          cwd=ROOT, env={**os.environ, 'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'},
                          capture_output=True, text=True, timeout=120)
  if expected_err is None:
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected_out
  else:
    assert result.returncode != 0
    assert expected_err in result.stderr, result.stderr


@pytest.mark.slow
def test_main_prints_the_backend_and_warns_before_validating(tmp_path):
  """A mesh the single CPU device cannot hold: the report comes first, then the config error (nothing compiled)."""
  env = {**os.environ, 'PYTHONPATH': ROOT, 'VLP_JAX_CACHE': str(tmp_path / 'cache'), 'JAX_PLATFORMS': 'cpu'}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS  # one CPU device, as a user has
  result = subprocess.run(
      [sys.executable, '-m', 'vlp_jax.main', '--config=configs/clip_shapes.py', f'--workdir={tmp_path / "run"}',
       '--config.mesh.fsdp=3', '--config.model.dtype=bfloat16'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stdout.splitlines()[0] == 'jax backend: cpu, 1 device'
  warnings = [line for line in result.stderr.splitlines() if line.startswith('warning: ')]
  assert any("config.model.dtype='bfloat16'" in w for w in warnings)
  assert any('config.mesh.fsdp=3' in w for w in warnings)
  assert 'error: ' in result.stderr
