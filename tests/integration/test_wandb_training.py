"""The Weights & Biases backend in a real run (training/writer.py, config.log.wandb_*): trained, stopped and resumed,
W&B gets the scalars TensorBoard and metrics.jsonl get, at the same steps, the end-of-run plot as an image and the
flattened config, in one W&B run across the resume. Skips without wandb (`pip install -e ".[wandb]"`)."""
import glob
import os

import numpy as np
import pytest

from vlp_jax.training import loop
from vlp_jax.training.writer import read_metrics

from wandb_support import (needs_wandb, offline_wandb, same_value,  # noqa: F401 (offline_wandb: a fixture)
                           tensorboard_scalars_and_images, wandb_runs)


@needs_wandb
@pytest.mark.slow
def test_wandb_gets_the_tensorboard_scalars_at_the_same_steps_across_a_resume(micro, tmp_path, offline_wandb):
  micro.log.update(wandb_project='vlp', wandb_mode='offline')
  workdir = tmp_path / 'run'
  first = loop.train_and_evaluate(micro, str(workdir), stop_at_step=3)
  assert first['step'] == 3
  second = loop.train_and_evaluate(micro, str(workdir))
  assert second['step'] == 6

  runs = wandb_runs(offline_wandb)
  assert len(runs) == 2 and runs[0]['id'] == runs[1]['id']  # the resumed process continued the same W&B run
  assert runs[0]['name'] == 'run'
  for run in runs:  # the config, flattened, as the run's config (the second with its own values)
    assert run['config']['total_steps'] == 6 and run['config']['model.vision.width'] == 32
    assert run['config']['log.wandb_project'] == 'vlp' and run['config']['eval.tasks'] == list(micro.eval.tasks)

  wandb_scalars, wandb_images = {}, set()
  for run in runs:
    for step, row in run['history'].items():
      for key, value in row.items():
        if key.startswith('plots/'):
          wandb_images.add((key.rsplit('/', 1)[0], step))
        elif not key.startswith('_'):  # W&B's own _step, _runtime, _timestamp
          assert (key, step) not in wandb_scalars, f'{key} written twice at step {step}'
          wandb_scalars[(key, step)] = value
  tb_scalars, tb_images = tensorboard_scalars_and_images(str(workdir))
  assert set(wandb_scalars) == set(tb_scalars)  # the same names at the same steps
  assert {step for _, step in tb_scalars} == {2, 3, 4, 6}  # log_every_steps=2, eval every 3, and the last step
  assert {'train/loss', 'train/learning_rate', 'perf/samples_per_sec', 'eval/synthetic/zeroshot_top1'} <= {
      name for name, _ in tb_scalars}
  for key, value in wandb_scalars.items():  # TensorBoard keeps float32
    assert same_value(float(np.float32(value)), tb_scalars[key]), (key, value, tb_scalars[key])
  from_jsonl = {(k, r['step']): v for r in read_metrics(str(workdir)) for k, v in r.items() if k not in ('step',
                                                                                                         'time')}
  assert from_jsonl.keys() == wandb_scalars.keys()
  assert all(same_value(wandb_scalars[key], value) for key, value in from_jsonl.items())  # exactly, as float64

  # The end-of-run plot at the last step of each call, to both.
  assert wandb_images == tb_images == {('plots/curves', 3), ('plots/curves', 6)}
  media = {os.path.realpath(p) for p in glob.glob(
      os.path.join(str(offline_wandb), '**', 'media', 'images', 'plots', 'curves_*.png'), recursive=True)}
  assert len(media) == 2 and all(open(p, 'rb').read(8) == b'\x89PNG\r\n\x1a\n' for p in media)
