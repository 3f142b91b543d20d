"""Zero-shot and retrieval metrics against naive references."""
import itertools

import numpy as np
import pytest

from vlp_jax.evaluation.affinity import affinity_consistency
from vlp_jax.evaluation.retrieval import random_ranking_recall, retrieval_chance, retrieval_metrics, text_groups
from vlp_jax.evaluation.zeroshot import class_embeddings, topk_accuracy, zeroshot_metrics
from vlp_jax.losses.affinity_consistency import affinity_consistency as in_batch


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


def naive_identical_text_recall(image_emb, text_emb, captions, caption_image, k):
  """Loops over queries: sort the candidates by score, positives after negatives of equal score (ties count against
  the query), and look for a positive in the first k. A caption is right for an image when its text is the text of
  one of the image's captions; an image is right for a caption when one of its captions has the caption's text."""
  sims = image_emb @ text_emb.T
  i2t = []
  for i in range(len(image_emb)):
    own = {captions[t] for t in range(len(captions)) if caption_image[t] == i}
    order = sorted(range(len(captions)), key=lambda t: (-sims[i, t], captions[t] in own))
    i2t.append(any(captions[t] in own for t in order[:k]))
  t2i = []
  for j in range(len(captions)):
    right = {caption_image[t] for t in range(len(captions)) if captions[t] == captions[j]}
    order = sorted(range(len(image_emb)), key=lambda m: (-sims[m, j], m in right))
    t2i.append(any(m in right for m in order[:k]))
  return np.mean(i2t), np.mean(t2i)


def _repeated_captions(rng, num_images, captions_per_image, vocabulary):
  """Captions drawn from `vocabulary` texts, so that texts repeat within and across images; identical texts get
  identical embeddings, as from any text encoder."""
  caption_image = rng.permutation(np.repeat(np.arange(num_images), captions_per_image))
  words = rng.integers(0, vocabulary, len(caption_image))
  captions = [f'text {w}' for w in words]
  table = _unit(rng.normal(size=(vocabulary, 8)))
  images = np.zeros((num_images, 8))
  np.add.at(images, caption_image, table[words])
  images = _unit(images + 1.0 * rng.normal(size=images.shape))
  return images, table[words], captions, caption_image


@pytest.mark.parametrize('captions_per_image,vocabulary', [(1, 12), (1, 50), (3, 20)])
def test_identical_caption_texts_match_against_naive_loops(captions_per_image, vocabulary):
  rng = np.random.default_rng(vocabulary + captions_per_image)
  images, texts, captions, caption_image = _repeated_captions(rng, 40, captions_per_image, vocabulary)
  assert len(set(captions)) < len(captions)  # the point: duplicates
  groups = text_groups(captions)
  for chunk in (7, 1024):
    got = retrieval_metrics(images, texts, caption_image, chunk=chunk, caption_groups=groups)
    for k in (1, 5, 10):
      i2t, t2i = naive_identical_text_recall(images, texts, captions, caption_image, k)
      assert got[f'i2t_r{k}'] == pytest.approx(i2t), (k, chunk)
      assert got[f't2i_r{k}'] == pytest.approx(t2i), (k, chunk)
  exact = retrieval_metrics(images, texts, caption_image)
  assert got['i2t_r1'] > exact['i2t_r1']  # the copies of an image's caption tie with it: exact matching loses them


def test_identical_caption_texts_lift_the_cap_of_repeated_captions():
  """A perfect model (each image embedded as its caption): exact matching loses every image whose caption repeats,
  since the copies tie with its own caption; matching identical texts finds them all."""
  captions = ['a', 'b', 'a', 'c', 'a', 'b']
  table = {'a': [1.0, 0, 0], 'b': [0, 1.0, 0], 'c': [0, 0, 1.0]}
  texts = np.array([table[c] for c in captions])
  exact = retrieval_metrics(texts, texts, np.arange(6))
  assert exact['i2t_r1'] == pytest.approx(1 / 6)  # only 'c' is unique
  grouped = retrieval_metrics(texts, texts, np.arange(6), caption_groups=text_groups(captions))
  assert grouped['i2t_r1'] == grouped['t2i_r1'] == 1.0
  constant = np.ones((6, 2)) / np.sqrt(2)
  tied = retrieval_metrics(constant, constant, np.arange(6), caption_groups=text_groups(captions))
  assert tied['i2t_r1'] == tied['t2i_r1'] == 0.0  # ties with a different text still count against the query


def test_distinct_groups_score_as_exact_matching():
  rng = np.random.default_rng(6)
  images = _unit(rng.normal(size=(30, 8)))
  caption_image = rng.permutation(np.repeat(np.arange(30), 2))
  texts = _unit(images[caption_image] + rng.normal(size=(60, 8)))
  assert retrieval_metrics(images, texts, caption_image, caption_groups=np.arange(60)) == \
      retrieval_metrics(images, texts, caption_image)


def test_text_groups_number_distinct_texts():
  groups = text_groups(['b', 'a', 'b', 'c', 'a b'])
  assert groups.tolist() == [2, 0, 2, 3, 1]
  assert text_groups([]).shape == (0,)


@pytest.mark.parametrize('captions,caption_image,k', [
    (['a', 'b', 'a', 'c', 'a'], [0, 1, 2, 3, 4], 1),
    (['a', 'b', 'a', 'c', 'a'], [0, 1, 2, 3, 4], 2),
    (['a', 'b', 'a', 'c', 'd', 'b'], [0, 0, 1, 2, 2, 3], 2),  # several captions per image
])
def test_chance_against_every_ranking(captions, caption_image, k):
  """The expected recall of a random ranking, by averaging over every order of the candidates."""
  caption_image = np.array(caption_image)
  num_images, num_texts = caption_image.max() + 1, len(captions)
  i2t = np.mean([np.mean([any(caption_image[t] == i or captions[t] in {captions[u] for u in np.flatnonzero(
      caption_image == i)} for t in order[:k]) for order in itertools.permutations(range(num_texts))])
                 for i in range(num_images)])
  t2i = np.mean([np.mean([any(captions[j] in {captions[u] for u in np.flatnonzero(caption_image == m)}
                              for m in order[:k]) for order in itertools.permutations(range(num_images))])
                 for j in range(num_texts)])
  got = random_ranking_recall(caption_image, num_images, k, text_groups(captions))
  assert got == pytest.approx((i2t, t2i))
  if len(set(caption_image.tolist())) == num_texts:  # one caption per image, exact matching: k / T and k / N
    assert random_ranking_recall(caption_image, num_images, k) == pytest.approx(retrieval_chance(num_images,
                                                                                                  num_texts, k))


def test_unrelated_embeddings_with_repeated_captions_score_at_the_grouped_chance():
  rng = np.random.default_rng(7)
  n = 600
  captions = [f'text {w}' for w in rng.integers(0, 40, n)]
  table = _unit(rng.normal(size=(40, 16)))
  texts = table[[int(c.split()[1]) for c in captions]]
  groups = text_groups(captions)
  i2t_chance, t2i_chance = random_ranking_recall(np.arange(n), n, 1, groups)
  assert i2t_chance == pytest.approx(np.mean(np.bincount(groups)[groups]) / n)  # an image's caption shared g times
  hits = [retrieval_metrics(_unit(rng.normal(size=(n, 16))), texts, np.arange(n), caption_groups=groups)
          for _ in range(5)]
  for direction, chance in (('i2t', i2t_chance), ('t2i', t2i_chance)):
    mean = np.mean([h[f'{direction}_r1'] for h in hits])
    assert abs(mean - chance) < 4 * np.sqrt(chance * (1 - chance) / (5 * n)), (direction, mean, chance)
