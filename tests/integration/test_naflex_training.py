"""SigLIP 2's NaFlex stage (configs/siglip2_shapes.py:naflex at the micro size) trained on the embedded data: the
late losses from step 4, NaFlex batches from step 6 at the budget each step draws; a run stopped before the NaFlex
switch and resumed ends bit for bit where the uninterrupted run does, and both evaluate zero-shot and retrieval at
two patch budgets."""
import os

import chex
import numpy as np
import pytest

import vlp_jax
from vlp_jax import parallel
from vlp_jax.config import from_file, validate
from vlp_jax.data.image.naflex_stage import batch_sequence_length
from vlp_jax.models.siglip_vit import SiglipViTTower
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics

from support import ROOT, micro_config

pytestmark = pytest.mark.slow  # two training runs, each compiling three train steps

LENGTHS, BUDGETS = (9, 16), (4, 16)


def _config(data_cache):
  """siglip2_shapes.py:naflex's objective on the micro model and data; 8 steps, the late losses from step 4 and the
  NaFlex stage from step 6 (steps 6 and 7 draw different budgets, so two NaFlex programs run)."""
  shapes = from_file(os.path.join(ROOT, 'configs', 'siglip2_shapes.py'), 'naflex')
  config = micro_config(data_cache)
  config.objective = shapes.objective
  config.objective.update(num_local_crops=2, local_crop_size=8, head_hidden_dim=16, head_bottleneck_dim=8,
                          head_prototypes=12, decoder_length=8, distill_start_fraction=0.5, naflex_start_fraction=0.75)
  config.model.vision = SiglipViTTower.options(16, 4, width=32, layers=1, heads=2)
  config.model.vision.update(naflex=True, max_patches=16)  # as the config: a NaFlex model for vlp_jax.load
  config.data.synthetic.regions = True
  config.data.naflex.sequence_lengths = LENGTHS
  config.eval.naflex_max_patches = BUDGETS
  config.eval.tasks, config.eval.datasets = ('zeroshot', 'retrieval'), ('synthetic',)
  config.total_steps = 8
  config.eval.every_steps = config.checkpoint.every_steps = 100  # at the end (and where the split run stops)
  config.checkpoint.async_save = False
  validate(config)
  return config


def test_the_naflex_stage_trains_resumes_exactly_across_its_switch_and_evaluates_at_two_budgets(data_cache,
                                                                                                tmp_path):
  config = _config(data_cache)
  assert [batch_sequence_length(config.seed, step, LENGTHS) for step in (6, 7)] == [16, 9]
  full = train_and_evaluate(config, str(tmp_path / 'full'))
  first = train_and_evaluate(config, str(tmp_path / 'split'), stop_at_step=5)
  split = train_and_evaluate(config, str(tmp_path / 'split'))
  assert first['step'] == 5 and split['step'] == full['step'] == 8
  for part in ('params', 'opt_state', 'model_state'):
    chex.assert_trees_all_equal(parallel.to_host(getattr(split['state'], part)),
                                parallel.to_host(getattr(full['state'], part)))
  logged = {r['step']: r for r in read_metrics(str(tmp_path / 'full')) if 'train/loss' in r}
  resumed = {r['step']: r for r in read_metrics(str(tmp_path / 'split')) if 'train/loss' in r}
  assert {s: r['train/loss'] for s, r in logged.items()} == {s: r['train/loss'] for s, r in resumed.items()}
  # Logged steps are counted from 1: step 6 ran train step 5 (late losses on), step 8 train step 7 (NaFlex, 9).
  assert logged[6]['train/distill_active'] == 1 and 'train/naflex_sequence_length' not in logged[6]
  assert logged[8]['train/naflex_sequence_length'] == 9 and 'train/distill_loss' not in logged[8]
  scores = {k: v for k, v in full['eval'].items() if k.startswith('eval/')}
  assert scores == {k: v for k, v in split['eval'].items() if k.startswith('eval/')}
  for budget in BUDGETS:
    for metric in ('zeroshot_top1', 'i2t_r1', 't2i_r1'):
      assert np.isfinite(scores[f'eval/synthetic/naflex{budget}_{metric}'])
  assert 'eval/synthetic/zeroshot_top1' in scores  # the square images too
  # The trained model embeds images of any aspect ratio, as NaFlex patches (the inference side's own tests check how).
  clip = vlp_jax.load(str(tmp_path / 'full'))
  embeddings = clip.encode_image([np.full((12, 28, 3), 200, np.uint8), np.zeros((30, 10, 3), np.uint8)])
  assert embeddings.shape == (2, 32) and np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
