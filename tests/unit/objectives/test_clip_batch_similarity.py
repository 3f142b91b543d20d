"""The within-batch similarity that CLIP logs under config.log.batch_similarity (read by the lab's stall
experiment), against a naive numpy computation."""
import math

import numpy as np

from support import unit_vectors
from vlp_jax.config import base_config
from vlp_jax.objectives.clip import ClipObjective


def naive_mean_offdiagonal_cosine(z):
  """The mean of z_i . z_j over every ordered pair i != j, by a double loop."""
  values = [float(np.dot(z[i], z[j])) for i in range(len(z)) for j in range(len(z)) if i != j]
  return np.mean(values)


def test_clip_logs_the_within_batch_similarity_only_when_asked():
  rng = np.random.default_rng(0)
  zi, zt = unit_vectors(rng, (7, 5)).astype(np.float32), unit_vectors(rng, (7, 5)).astype(np.float32)
  objective = ClipObjective(None, None)
  config = base_config()
  objective.bind(config)
  features, params = {'zi': zi, 'zt': zt}, {'logit_scale': np.float32(math.log(10))}
  assert not {'image_batch_similarity', 'text_batch_similarity'} & set(objective.loss(features, params, 0)[1])
  config.log.batch_similarity = True
  objective.bind(config)
  metrics = objective.loss(features, params, 0)[1]
  np.testing.assert_allclose(metrics['image_batch_similarity'], naive_mean_offdiagonal_cosine(zi), rtol=1e-5)
  np.testing.assert_allclose(metrics['text_batch_similarity'], naive_mean_offdiagonal_cosine(zt), rtol=1e-5)
