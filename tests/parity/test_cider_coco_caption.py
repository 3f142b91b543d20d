"""CIDEr-D (evaluation/captioning.py) against the scorer the captioning papers report, coco-caption's CiderScorer
(pycocoevalcap, the `parity` extra), on a random corpus: the same score for every image."""
import numpy as np
import pytest

from vlp_jax.evaluation import captioning

WORDS = ('a', 'red', 'blue', 'green', 'circle', 'square', 'star', 'left', 'of', 'above', 'the', 'two', 'small')


def random_caption(rng: np.random.Generator) -> str:
  return ' '.join(rng.choice(WORDS, size=int(rng.integers(2, 13))))


@pytest.mark.slow
def test_cider_d_equals_coco_captions_scorer_on_every_image():
  cider_scorer = pytest.importorskip('pycocoevalcap.cider.cider_scorer')
  rng = np.random.default_rng(0)
  references = [[random_caption(rng) for _ in range(int(rng.integers(1, 6)))] for _ in range(60)]
  # some candidates are one of their references, the others random
  candidates = [refs[0] if m % 3 == 0 else random_caption(rng) for m, refs in enumerate(references)]
  scorer = cider_scorer.CiderScorer(n=4, sigma=6.0)
  for candidate, refs in zip(candidates, references):
    scorer += (candidate, refs)
  mean, per_image = scorer.compute_score()
  ours = captioning.cider_d(candidates, references)
  np.testing.assert_allclose(ours, per_image, rtol=1e-12, atol=1e-12)
  assert ours.mean() == pytest.approx(mean, rel=1e-12) and mean > 0.5
