"""What the trainer checks before it trains: every missing input listed at once, the memory the compiled step needs
against the machine's, and no empty checkpoints/ folder left by a start that failed."""
import os

import jax
import jax.numpy as jnp
import pytest

from support import ROOT
from vlp_jax import errors, hardware, parallel
from vlp_jax.config import from_file
from vlp_jax.training import step as step_lib
from vlp_jax.training.flops import program_memory
from vlp_jax.training.loop import check_config_and_inputs, train_and_evaluate


def test_every_missing_input_is_listed_at_once_with_its_fix(tmp_path):
  config = from_file(os.path.join(ROOT, 'configs', 'saco_cc3m.py'))
  config.init.checkpoint = str(tmp_path / 'no_such_checkpoint')
  with pytest.raises(errors.DataNotFoundError) as caught:
    check_config_and_inputs(config)
  message = str(caught.value)
  assert message.startswith('this run needs 3 inputs it does not have:')
  assert '1. config.objective.saco.beta > 0 (pseudo-affinity mimic) needs teacher embeddings' in message
  assert '2. config.data.path is empty' in message and 'python -m vlp_jax.convert' in message
  assert f"3. config.init.checkpoint='{tmp_path}/no_such_checkpoint' does not exist" in message
  assert errors.exit_code(caught.value) == errors.EXIT_CONFIG


@pytest.mark.slow
def test_a_start_that_fails_on_its_data_leaves_no_empty_checkpoint_folder(tmp_path):
  config = from_file(os.path.join(ROOT, 'configs', 'clip_shapes.py'))
  shard = tmp_path / 'web' / 'broken.tar'
  shard.parent.mkdir()
  shard.write_bytes(b'not a tar file at all' * 40)  # found when the first batch is read, after checkpoints/ is made
  config.data.name, config.data.path, config.data.cache_dir = 'webdataset', str(shard), str(tmp_path / 'cache')
  config.eval.datasets = ('synthetic',)  # a small embedded set to evaluate on: the start gets to the first batch
  config.data.synthetic.update(num_train=64, num_val=16, num_test=16)
  workdir = tmp_path / 'run'
  with pytest.raises(errors.DataError, match='records in a row are bad'):
    train_and_evaluate(config, str(workdir))
  assert workdir.is_dir() and not (workdir / 'checkpoints').exists()


@pytest.mark.parametrize('needed, local, platform, limit, host, expected', [
    (2 * 2**30, 1, 'gpu', 80 * 2**30, 16 * 2**30, None),
    (90 * 2**30, 1, 'gpu', 80 * 2**30, 512 * 2**30, 'needs 90.0 GiB per device, and a gpu device here has 80.0 GiB'),
    (3 * 2**30, 8, 'cpu', None, 16 * 2**30, 'needs 24.0 GiB of host memory (8 CPU devices), and this machine has '
                                            '16.0 GiB'),
    (3 * 2**30, 4, 'cpu', None, 16 * 2**30, None),
    (2**40, 1, 'tpu', None, 2**30, None),  # no limit known: nothing to say
])
def test_memory_shortfall_compares_the_step_with_the_devices_memory(needed, local, platform, limit, host, expected):
  assert hardware.memory_shortfall(needed, local, platform, limit, host) == expected


def test_the_step_memory_counts_arguments_outputs_and_temporaries_less_donated_buffers():
  x = jnp.ones((256, 256), jnp.float32)
  kept = jax.jit(lambda a: a * 2).lower(x).compile()
  donated = jax.jit(lambda a: a * 2, donate_argnums=0).lower(x).compile()
  analysis = kept.memory_analysis()
  assert program_memory(kept) == (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
                                  + analysis.temp_size_in_bytes)
  assert program_memory(kept) >= 2 * x.nbytes
  assert program_memory(donated) == program_memory(kept) - x.nbytes  # the output reuses the donated input


def test_a_step_that_cannot_fit_stops_before_it_runs(monkeypatch):
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  step_lib.check_memory(2**30, mesh)  # fits this machine
  monkeypatch.setattr(hardware, 'host_memory_bytes', lambda: 2**29)
  with pytest.raises(errors.ConfigError, match=r'the compiled train step needs 1.0 GiB of host memory \(1 CPU '
                                               r'device\), and this machine has 0.5 GiB: lower config.batch_size'):
    step_lib.check_memory(2**30, mesh)
  step_lib.check_memory(None, mesh)  # a backend without a memory analysis: nothing to check
