"""Zero-shot and retrieval metrics against naive references."""
import numpy as np
import pytest

from vlp_jax.evaluation.retrieval import retrieval_metrics
from vlp_jax.evaluation.zeroshot import class_embeddings, topk_accuracy, zeroshot_metrics


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def naive_recall(image_emb, text_emb, caption_image, k):
  """Rank every query against all candidates by sorting, as in the CLIP benchmark scripts (ties: stable order)."""
  sims = image_emb @ text_emb.T
  i2t = np.mean([np.any(np.isin(np.argsort(-sims[i], kind='stable')[:k], np.flatnonzero(caption_image == i)))
                 for i in range(len(image_emb))])
  t2i = np.mean([caption_image[j] in np.argsort(-sims[:, j], kind='stable')[:k] for j in range(len(text_emb))])
  return i2t, t2i


@pytest.mark.parametrize('captions_per_image', [1, 5])
def test_retrieval_matches_naive_ranking(captions_per_image):
  rng = np.random.default_rng(captions_per_image)
  images = _unit(rng.normal(size=(40, 8)))
  caption_image = np.repeat(np.arange(40), captions_per_image)
  texts = _unit(images[caption_image] + 1.2 * rng.normal(size=(len(caption_image), 8)))
  got = retrieval_metrics(images, texts, caption_image, chunk=7)
  for k in (1, 5, 10):
    i2t, t2i = naive_recall(images, texts, caption_image, k)
    assert got[f'i2t_r{k}'] == pytest.approx(i2t)
    assert got[f't2i_r{k}'] == pytest.approx(t2i)
  assert 0 < got['i2t_r1'] < got['i2t_r10'] <= 1


def test_retrieval_perfect_and_ties():
  emb = np.eye(6)
  perfect = retrieval_metrics(emb, emb, np.arange(6))
  assert perfect['i2t_r1'] == perfect['t2i_r1'] == 1.0
  constant = retrieval_metrics(np.ones((6, 2)) / np.sqrt(2), np.ones((6, 2)) / np.sqrt(2), np.arange(6))
  assert constant['i2t_r1'] == constant['t2i_r1'] == 0.0  # ties never count as a hit


def test_topk_accuracy_against_sorting():
  rng = np.random.default_rng(0)
  logits, labels = rng.normal(size=(50, 12)), rng.integers(0, 12, 50)
  for k in (1, 3, 5):
    want = np.mean([labels[i] in np.argsort(-logits[i])[:k] for i in range(50)])
    assert topk_accuracy(logits, labels, k) == pytest.approx(want)


def test_zeroshot_with_template_averaging():
  rng = np.random.default_rng(1)
  class_dirs = _unit(rng.normal(size=(4, 16)))
  names = ['red circle', 'blue star', 'green cross', 'yellow square']

  def encode_texts(prompts):  # each prompt embeds near its class direction, templates add noise
    return _unit(np.stack([class_dirs[names.index(p.split(':')[1])] + 0.3 * rng.normal(size=16) for p in prompts]))
  classes = class_embeddings(encode_texts, names, ['a:{}', 'b:{}', 'c:{}'])
  np.testing.assert_allclose(np.linalg.norm(classes, axis=1), 1.0)
  labels = np.array([0, 1, 2, 3, 0, 1])
  metrics = zeroshot_metrics(class_dirs[labels], classes, labels)
  assert metrics['zeroshot_top1'] == 1.0 and metrics['zeroshot_chance'] == 0.25
  assert zeroshot_metrics(class_dirs[labels], classes, (labels + 1) % 4)['zeroshot_top1'] == 0.0


def test_affinity_consistency_against_pearson():
  from vlp_jax.evaluation.affinity import affinity_consistency
  rng = np.random.default_rng(3)
  images = _unit(rng.normal(size=(30, 6)))
  texts = _unit(images + 0.5 * rng.normal(size=(30, 6)))
  si, st = images @ images.T, texts @ texts.T
  want = np.mean([np.corrcoef(np.delete(si[i], i), np.delete(st[i], i))[0, 1] for i in range(30)])  # j != i
  assert affinity_consistency(images, texts, chunk=7) == pytest.approx(want, rel=1e-6)
  assert affinity_consistency(images, images) == pytest.approx(1.0)
  with pytest.raises(ValueError, match='paired'):
    affinity_consistency(images, texts[:5])


def test_affinity_consistency_of_unrelated_embeddings_is_near_zero():
  """SaCo compares a query with the OTHER samples: the pair's own SI_ii = ST_ii = 1 must not count. With it, two
  independent sets of 128 embeddings would score about 0.33."""
  from vlp_jax.evaluation.affinity import affinity_consistency
  from vlp_jax.losses.saco import affinity_consistency as in_batch
  rng = np.random.default_rng(0)
  images, texts = _unit(rng.normal(size=(128, 64))), _unit(rng.normal(size=(128, 64)))
  assert abs(affinity_consistency(images, texts)) < 0.03
  assert abs(float(in_batch(images.astype(np.float32), texts.astype(np.float32)))) < 0.03


def test_retrieval_chunked_equals_unchunked():
  """Chunking only bounds memory: any chunk size gives exactly the one-matrix result."""
  rng = np.random.default_rng(4)
  images = _unit(rng.normal(size=(23, 8)))
  caption_image = rng.permutation(np.repeat(np.arange(23), 3))  # captions in any order
  texts = _unit(images[caption_image] + rng.normal(size=(69, 8)))
  whole = retrieval_metrics(images, texts, caption_image, chunk=10_000)
  for chunk in (1, 4, 23, 50):
    assert retrieval_metrics(images, texts, caption_image, chunk=chunk) == whole


def test_unrelated_embeddings_score_at_chance():
  """Images and captions (or classes) drawn independently: recall@K and accuracy sit at their chance levels."""
  from vlp_jax.evaluation.retrieval import retrieval_chance
  rng = np.random.default_rng(5)
  n = 400
  got = retrieval_metrics(_unit(rng.normal(size=(n, 16))), _unit(rng.normal(size=(n, 16))), np.arange(n))
  i2t_chance, t2i_chance = retrieval_chance(n, n, 10)
  sigma = np.sqrt(i2t_chance * (1 - i2t_chance) / n)
  assert abs(got['i2t_r10'] - i2t_chance) < 4 * sigma and abs(got['t2i_r10'] - t2i_chance) < 4 * sigma
  labels = rng.integers(0, 10, 4000)
  metrics = zeroshot_metrics(_unit(rng.normal(size=(4000, 16))), _unit(rng.normal(size=(10, 16))), labels)
  assert abs(metrics['zeroshot_top1'] - metrics['zeroshot_chance']) < 4 * np.sqrt(0.1 * 0.9 / 4000)
  assert abs(metrics['zeroshot_top5'] - 0.5) < 4 * np.sqrt(0.25 / 4000)
