"""The optional Weights & Biases backend of the metric writer (training/writer.py, config.log.wandb_*): one W&B run
across a resume, the config as the run's config; a bad mode names the key and the choices, and a missing wandb fails
before anything is compiled, saying how to install it (a real run's scalars and plots against TensorBoard's:
tests/integration/test_wandb_training.py). The tests that need wandb skip without it (`pip install -e ".[wandb]"`);
they run it offline, under the test's tmp directory."""
import sys

import pytest

from vlp_jax.config import ConfigError, base_config, validate
from vlp_jax.training import loop
from vlp_jax.training import writer as writer_lib

from wandb_support import needs_wandb, offline_wandb, wandb_runs  # noqa: F401 (a fixture)


def test_the_wandb_keys_default_to_off():
  log = base_config().log
  assert (log.wandb_project, log.wandb_entity, log.wandb_mode, log.wandb_run_name) == ('', '', 'online', '')
  assert 'peak_device_tflops' in log


def test_a_bad_wandb_mode_names_the_key_and_the_choices():
  config = base_config()
  config.log.wandb_mode = 'offlin'
  with pytest.raises(ConfigError, match=r"config.log.wandb_mode='offlin' is not valid; valid choices: "
                                        r"\['online', 'offline', 'disabled'\]"):
    validate(config)
  for mode in ('online', 'offline', 'disabled'):
    config.log.wandb_mode = mode
    validate(config)


def test_a_missing_wandb_fails_before_anything_is_compiled(micro, tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, 'wandb', None)  # `import wandb` raises ImportError, as when not installed

  def built(*args, **kwargs):
    raise AssertionError('the run was built (and would compile) before the missing wandb was reported')

  monkeypatch.setattr(loop, 'build_context', built)
  monkeypatch.setattr(loop.formats, 'train_paths', built)
  micro.log.wandb_project = 'vlp'
  with pytest.raises(ConfigError, match=r"config.log.wandb_project='vlp'.*wandb is not installed.*"
                                        r"`pip install wandb`"):
    loop.train_and_evaluate(micro, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()
  writer_lib.check_backends(base_config())  # no project: wandb is never imported


def test_the_run_id_is_kept_for_a_resume_and_new_for_a_fresh_start(tmp_path):
  workdir = str(tmp_path)
  first = writer_lib.wandb_run_id(workdir, resume_step=0)
  assert (tmp_path / writer_lib.WANDB_RUN_ID_FILE).read_text().strip() == first
  assert writer_lib.wandb_run_id(workdir, resume_step=3) == first
  fresh = writer_lib.wandb_run_id(workdir, resume_step=0)  # no checkpoint: metrics.jsonl starts over, so does W&B
  assert fresh != first and writer_lib.wandb_run_id(workdir, resume_step=5) == fresh
  (tmp_path / writer_lib.WANDB_RUN_ID_FILE).unlink()
  assert writer_lib.wandb_run_id(workdir, resume_step=5) not in (first, fresh)  # lost: a new one rather than none


def test_flat_config_uses_dotted_keys():
  flat = writer_lib.flat_config(base_config())
  assert flat['optim.lr'] == 5e-4 and flat['model.vision.type'] == 'vit' and flat['log.wandb_mode'] == 'online'
  assert flat['eval.datasets'] == ['synthetic'] and not any(isinstance(v, dict) for v in flat.values())


@needs_wandb
def test_the_backend_resumes_the_same_run_and_writes_into_the_workdir(tmp_path, offline_wandb, monkeypatch):
  monkeypatch.delenv('WANDB_DIR')  # the default place: workdir/wandb/
  config = base_config()
  config.log.update(wandb_project='vlp', wandb_mode='offline')
  workdir = tmp_path / 'my_run'
  ids = []
  for resume_step in (0, 3, 0):
    backend = writer_lib.WandB(str(workdir), config, resume_step)
    ids.append(backend.run.id)
    assert backend.run.name == 'my_run'
    backend.scalars(resume_step + 1, {'train/loss': 1.0})
    backend.close()
  assert ids[0] == ids[1] != ids[2]
  runs = wandb_runs(workdir / 'wandb')
  assert [run['id'] for run in runs] == ids and all(run['name'] == 'my_run' for run in runs)
  config.log.wandb_run_name = 'named'
  backend = writer_lib.WandB(str(workdir), config, 4)
  assert backend.run.name == 'named' and backend.run.id == ids[2]
  backend.close()
