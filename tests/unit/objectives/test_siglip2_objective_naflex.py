"""SigLIP 2's NaFlex stage in the objective (objectives/siglip2.py): a NaFlex batch trains the sigmoid loss and the
decoder alone (no self-distillation, no masked prediction), the decoder reads each image's real patches only
(padding changes nothing), and decoupled accumulation stays exact on padded sequences."""
import chex
import jax
import numpy as np
import pytest

from support import accumulated_loss_and_grads, assert_close_at_scale, jit_init
from vlp_jax import models, objectives, parallel
from vlp_jax.config import validate
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.image.naflex_stage import PATCHES, SPATIAL_SHAPES, batch_sequence_length
from vlp_jax.data.loading.pipeline import DecodeRecord
from vlp_jax.objectives.siglip2 import ACTIVE, DECODER, NAFLEX_BUDGET, normalized_naflex_patches

LENGTHS = (12, 20)


def _naflex(config, **options):
  """The micro config with SigLIP's tower and SigLIP 2's objective (decoder on, every loss), the NaFlex stage from
  step 2 of 4."""
  config.model.vision.type = 'siglip_vit'
  config.objective.name = 'siglip2'
  config.data.synthetic.regions = True
  config.objective.update(num_local_crops=2, local_crop_size=8, head_hidden_dim=16, head_bottleneck_dim=8,
                          head_prototypes=12, size_factor=1.0, decoder_weight=1.0, decoder_box_bins=8,
                          decoder_length=8, decoder_parallel_prob=0.5, distill_start_fraction=0.0,
                          naflex_start_fraction=0.5, **options)
  config.data.naflex.sequence_lengths = LENGTHS
  config.total_steps = 4
  validate(config)
  return config


def _naflex_batch(config, size, step):
  """The views of `size` examples drawn for train step `step` (NaFlex from step 2), images of several aspect ratios
  (crops of the rendered squares), stacked as the pipeline batches them."""
  views, decode = objectives.OBJECTIVES.get('siglip2').views(config), DecodeRecord()
  examples = []
  for i in range(size):
    example = decode.map(records.serialize(synthetic.make_example(0, 'train', 'studio', i, 24, regions=i % 4 != 3)))
    example['image'] = example['image'][:24 - 4 * (i % 3), :24 - 6 * (i % 2)]
    examples.append(views.random_map({**example, pipeline.STEP_KEY: step}, np.random.default_rng([step, i])))
  return {k: np.stack([e[k] for e in examples]) for k in examples[0]}


def _noisy(tree, seed=1):
  """`tree` plus small Gaussian noise (on the host: eagerly, jax compiles a program per leaf shape)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: np.asarray(x) + 0.05 * rng.normal(size=x.shape).astype(np.float32), tree)


def _forward_fn(objective):
  """(params, state, batch) -> (features, loss, metrics) on the host, jitted once (at step 2)."""
  def forward(params, state, batch):
    features, _ = objective.forward(params, state, batch, jax.random.key(3))
    return (features, *objective.loss(features, params, 2))
  jitted = jax.jit(forward)
  return lambda *args: parallel.to_host(jitted(*args))


@pytest.mark.slow  # two programs with the decoder: about 10 s of CPU
def test_a_naflex_batch_trains_the_sigmoid_loss_and_the_decoder_on_real_patches_only(micro):
  config = _naflex(micro)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  params = {**params, DECODER: _noisy(params[DECODER])}  # its output layer starts at 0: it would read nothing
  state = {**state, ACTIVE: np.int32(1)}  # the late losses are on: the NaFlex batch still leaves them out
  batch = _naflex_batch(config, 8, step=2)
  budget = batch_sequence_length(config.seed, 2, LENGTHS)
  assert PATCHES in batch and 'global_view' not in batch and batch[PATCHES].shape[1] == budget
  real = np.prod(batch[SPATIAL_SHAPES], axis=1)
  assert len(set(real.tolist())) > 1 and real.min() < budget  # several lengths, and padding
  forward = _forward_fn(objective)
  features, loss, metrics = forward(params, state, batch)
  assert 'distill_loss' not in metrics and 'masked_loss' not in metrics and 'distill_teacher' not in features
  assert metrics['naflex_sequence_length'] == budget and metrics['decoder_loss'] > 0
  np.testing.assert_allclose(loss, metrics['siglip_loss'] + metrics['decoder_loss'], rtol=1e-6)
  # What lies in the padding rows is read by nothing: not the tower, not the decoder's cross-attention. (The
  # train step zeroes them when it normalises uint8 patches; patches given normalised keep what they hold.)
  assert batch[PATCHES].dtype == np.uint8
  normalized = np.asarray(normalized_naflex_patches(batch[PATCHES], batch[SPATIAL_SHAPES], objective.preprocessing))
  padding = np.arange(budget)[None, :, None] >= real[:, None, None]
  noisy = {**batch, PATCHES: np.where(padding, np.random.default_rng(0).normal(size=normalized.shape) * 10,
                                      normalized).astype(np.float32)}
  noisy_features, noisy_loss, _ = forward(params, state, noisy)
  for key in ('zi', 'decoder_nll', 'decoder_correct'):
    np.testing.assert_allclose(noisy_features[key], features[key], rtol=1e-5, atol=1e-6, err_msg=key)
  np.testing.assert_allclose(noisy_loss, loss, rtol=1e-6)
  assert features[NAFLEX_BUDGET].shape == (8,)


@pytest.mark.slow
def test_decoupled_accumulation_is_exact_on_padded_naflex_batches(micro):
  """A NaFlex batch (images of several grids, padded to the batch's budget; the decoder on with parallel captions,
  some examples without regions): the same loss, metrics and gradient whole or in 2 micro-batches."""
  config = _naflex(micro)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jit_init(objective.init_variables)(jax.random.key(0))
  params = {**params, DECODER: _noisy(params[DECODER])}
  batch, mesh, rng = _naflex_batch(config, 16, step=3), parallel.make_mesh(), jax.random.key(3)
  loss, metrics, new_state, grads = accumulated_loss_and_grads(objective, params, state, batch, rng, 'none', 1, mesh)
  d_loss, d_metrics, d_state, d_grads = accumulated_loss_and_grads(objective, params, state, batch, rng, 'decoupled',
                                                                   2, mesh)
  assert metrics['decoder_loss'] > 0 and 'distill_loss' not in metrics
  np.testing.assert_allclose(d_loss, loss, rtol=1e-5)
  chex.assert_trees_all_close(d_metrics, metrics, rtol=1e-5, atol=1e-6)
  assert_close_at_scale(d_state, new_state)
  assert_close_at_scale(d_grads, grads)
  for key in ('visual', DECODER):
    assert max(float(np.abs(leaf).max()) for leaf in jax.tree.leaves(d_grads[key])) > 0, key
