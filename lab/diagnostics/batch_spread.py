#!/usr/bin/env python
"""What a CLIP step sees in mixed and in single-source (debiased) batches of the embedded dataset: how far apart a
batch's embeddings are, and how large the CLIP loss's gradient is, at random initialisation and at a trained
checkpoint.

python lab/diagnostics/batch_spread.py [--checkpoint=WORKDIR_OF_A_TRAINED_RUN] [--captions=detailed] [--batches=8]

For each model (the random initialisation of config.seed, and the checkpoint if given), draws `--batches` batches of
128 train pairs from all sources at random ('mixed') and from each source alone ('studio', 'web', 'sketch'), and
prints one JSON line per (model, batch kind):
  image_cosine:  mean cosine between two different images' embeddings of a batch (1 = the batch looks alike);
  logit_std:     standard deviation of the scaled image-text logits inside a row, averaged over rows;
  loss:          the CLIP loss of the batch (ln 128 = 4.85 is chance);
  grad_norm:     the global norm of the loss's gradient with respect to every parameter.
the results archive (2026-11-25, part 8) reads it for the ZeroVL ablation.
"""
from __future__ import annotations

import functools
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from vlp_jax import models, objectives  # noqa: E402
from vlp_jax.config import from_file, validate  # noqa: E402
from vlp_jax.data.loading import pipeline  # noqa: E402
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.sources.synthetic_shapes import CAPTION_STYLES  # noqa: E402
from vlp_jax.training.checkpoint import load_pretrained  # noqa: E402

FLAGS = flags.FLAGS


@functools.lru_cache(maxsize=4)
def _loss_features_and_grads(objective):
  """((loss, features), grads) of a batch's CLIP loss, jitted once per objective: every batch of the same shapes
  runs one compiled program (op by op, each batch would take seconds)."""

  def loss_fn(params, model_state, batch):
    features, _ = objective.forward(params, model_state, batch, jax.random.key(0), train=False)
    loss, _ = objective.loss(features, params, jnp.int32(0))
    return loss, features

  return jax.jit(jax.value_and_grad(loss_fn, has_aux=True))


def batch_statistics(objective, params: dict, model_state: dict, batch: dict) -> dict[str, float]:
  """The spread of one batch's embeddings and the size of its CLIP gradient (see the module docstring)."""

  (loss, features), grads = _loss_features_and_grads(objective)(params, model_state, batch)
  zi, zt = np.asarray(features['zi']), np.asarray(features['zt'])
  n = zi.shape[0]
  cosine = zi @ zi.T
  logits = float(np.exp(np.asarray(params['logit_scale']))) * zi @ zt.T
  return {'image_cosine': float((cosine.sum() - np.trace(cosine)) / (n * (n - 1))),
          'logit_std': float(logits.std(axis=1).mean()), 'loss': float(loss),
          'grad_norm': float(optax.global_norm(grads))}


def main(argv):
  del argv

  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  config = from_file(os.path.join(root, 'configs', 'shapes_base.py'))
  config.data.synthetic.captions = FLAGS.captions
  validate(config, num_devices=1)
  root = synthetic.ensure_dataset(synthetic.spec_from_config(config.data), config.data.cache_dir or None)
  views = objectives.OBJECTIVES.get(config.objective.name).views(config)
  examples = {s: pipeline.read_all(synthetic.shard_paths(root, 'train', (s,))) for s in synthetic.SOURCES}
  pooled = [e for s in synthetic.SOURCES for e in examples[s]]
  rng = np.random.default_rng(FLAGS.seed)
  decode = pipeline.DecodeRecord()

  def draw(pool: list[dict]) -> dict:
    rows = [views.random_map(decode.map(records.serialize(pool[i])), rng)
            for i in rng.choice(len(pool), config.batch_size, replace=False)]
    return {k: np.stack([r[k] for r in rows]) for k in ('image', 'text')}

  kinds = {'mixed': pooled, **examples}
  batches = {kind: [draw(pool) for _ in range(FLAGS.batches)] for kind, pool in kinds.items()}
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  params, model_state = jax.tree.map(np.asarray, objective.init_variables(jax.random.key(config.seed)))
  weights = {'random init': (params, model_state)}
  if FLAGS.checkpoint:
    trained, state, _ = load_pretrained(FLAGS.checkpoint, params, model_state, config.model)
    weights[FLAGS.checkpoint] = (trained, state)
  for name, (p, s) in weights.items():
    for kind, kind_batches in batches.items():
      stats = [batch_statistics(objective, p, s, b) for b in kind_batches]
      print(json.dumps({'model': name, 'batches': kind, **{k: round(float(np.mean([x[k] for x in stats])), 4)
                                                           for k in stats[0]}}), flush=True)


if __name__ == '__main__':
  flags.DEFINE_string('checkpoint', '', 'A trained run (workdir or step directory) to compare with the random init.')
  flags.DEFINE_enum('captions', 'detailed', list(CAPTION_STYLES), "The embedded dataset's caption style.")
  flags.DEFINE_integer('batches', 8, 'Batches averaged per kind.')
  flags.DEFINE_integer('seed', 0, 'Seed of the batch draws.')
  app.run(main)
