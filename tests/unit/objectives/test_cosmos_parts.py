"""COSMOS building blocks: text crops from long captions and the cross-attention module."""
import collections
import random

import pytest
import jax
import jax.numpy as jnp
import numpy as np

from vlp_jax.data.text.text_crops import split_sentences, text_crops
from vlp_jax.models.cross_attention import CrossAttention


def test_split_sentences():
  assert split_sentences('There is a red circle. The background is white!  Is it? ') == [
      'There is a red circle.', 'The background is white!', 'Is it?']
  assert split_sentences('') == []


def test_text_crops_sample_sentences_of_the_caption():
  caption = 'S1 one. S2 two. S3 three. S4 four. S5 five. S6 six.'
  sentences = set(split_sentences(caption))
  rng = np.random.default_rng(0)
  lengths = []
  for _ in range(200):
    crops = text_crops(caption, 'short', rng)
    assert len(crops) == 8
    for i, crop in enumerate(crops):
      parts = split_sentences(crop)
      assert set(parts) <= sentences and len(parts) == len(set(parts))  # without replacement
      if i >= 2:
        assert len(parts) == 1  # local crops are one sentence
      else:
        lengths.append(len(parts))
  assert set(lengths) == {1, 2, 3, 4, 5}  # global crops take 1 to 5 sentences
  assert text_crops('', 'the short caption', rng) == ['the short caption'] * 8
  a, b = text_crops(caption, '', np.random.default_rng(3)), text_crops(caption, '', np.random.default_rng(3))
  assert a == b


@pytest.mark.slow
def test_cross_attention_zero_init_returns_the_query_and_masks_padding():
  query = jax.random.normal(jax.random.key(0), (2, 3, 16))
  tokens = jax.random.normal(jax.random.key(1), (2, 5, 8))
  zero = CrossAttention(16, heads=4, zero_init_output=True)
  params = zero.init(jax.random.key(2), query, tokens)['params']
  np.testing.assert_array_equal(zero.apply({'params': params}, query, tokens), query)
  module = CrossAttention(16, heads=4)
  params = module.init(jax.random.key(2), query, tokens)['params']
  mask = jnp.array([[True, True, False, False, False]] * 2)
  out = module.apply({'params': params}, query, tokens, mask)
  assert out.shape == (2, 3, 16) and not np.allclose(out, query)
  changed = tokens.at[:, 2:].set(100.0)  # masked-out tokens do not matter
  np.testing.assert_allclose(module.apply({'params': params}, query, changed, mask), out, rtol=1e-5, atol=1e-5)
  assert set(params) == {'token_proj', 'ln_q', 'ln_kv', 'q_proj', 'k_proj', 'v_proj', 'out_proj'}


def test_text_crops_can_include_the_short_caption():
  caption = 'S1 one. S2 two. S3 three.'
  pool = set(split_sentences(caption)) | {'the short one'}
  rng = np.random.default_rng(0)
  local = [text_crops(caption, 'the short one', rng, include_caption=True)[2:] for _ in range(300)]
  drawn = {crop for crops in local for crop in crops}
  assert drawn == pool  # the short caption is one more sentence of the pool, drawn like the others
  assert all('the short one' not in c for _ in range(100) for c in text_crops(caption, 'the short one', rng))


def test_text_crops_can_start_with_the_short_caption():
  caption = 'S1 one. S2 two. S3 three.'
  rng = np.random.default_rng(0)
  for _ in range(50):
    crops = text_crops(caption, 'the short one', rng, num_global=2, num_local=3, caption_first=True)
    assert len(crops) == 5 and crops[0] == 'the short one'
    assert all('the short one' not in c for c in crops[1:])  # the rest come from the long caption's sentences
  pool = set(split_sentences(caption))
  crops = [text_crops(caption, 'x', rng, num_global=1, num_local=2, caption_first=True)[1:] for _ in range(100)]
  assert {c for sampled in crops for c in sampled} == pool


def naive_authors_local_crops(pool, count, rand):
  """The authors' `random_sample_from_list` (COSMOS code, training/data.py), with Python's `random`: the whole pool
  as many times as it fits, then a sample without replacement of the rest."""
  full, rest = divmod(count, len(pool))
  return full * list(pool) + rand.sample(list(pool), rest)


@pytest.mark.parametrize('size', [3, 4, 6, 8])
def test_local_text_crops_are_drawn_without_replacement_like_the_authors(size):
  """Six local crops from a pool of `size` sentences: distinct while the pool lasts, else every sentence floor or ceil
  of 6 / size times; the multiset of crops has the distribution of the authors' sampler."""
  pool = [f'S{i} sentence.' for i in range(size)]
  caption = ' '.join(pool)
  rng, rand, trials = np.random.default_rng(0), random.Random(0), 3000
  ours = collections.Counter(tuple(sorted(text_crops(caption, 'x', rng)[2:])) for _ in range(trials))
  naive = collections.Counter(tuple(sorted(naive_authors_local_crops(pool, 6, rand))) for _ in range(trials))
  assert set(ours) == set(naive)  # the same support: no multiset the authors' sampler cannot draw
  for crops in ours:
    counts = collections.Counter(crops)
    assert set(counts.values()) <= {6 // size, -(-6 // size)} and len(crops) == 6
  for crops in set(ours) | set(naive):  # the same frequencies, up to sampling noise (std < 0.01)
    assert abs(ours[crops] - naive[crops]) / trials < 0.04, crops


def test_global_text_crops_are_drawn_independently_of_each_other_and_of_the_local_ones():
  """Supplementary E.7: "global captions may or may not include local captions"; the two global crops are drawn
  on their own too. So with 8 sentences a global crop often shares a sentence with a local one or with the other
  global one, and the first global crop is what a call drawing it alone gives (the same generator state)."""
  caption = ' '.join(f'S{i} sentence.' for i in range(8))
  shared_local = shared_global = 0
  for seed in range(300):
    crops = text_crops(caption, 'x', np.random.default_rng(seed))
    first, second = (set(split_sentences(c)) for c in crops[:2])
    shared_local += bool(first & set(crops[2:]))
    shared_global += bool(first & second)
    assert crops[0] == text_crops(caption, 'x', np.random.default_rng(seed), num_global=1, num_local=0)[0]
  assert shared_local > 150 and shared_global > 50


def test_global_text_crops_take_up_to_max_sentences():
  caption = ' '.join(f'S{i} sentence.' for i in range(8))
  rng = np.random.default_rng(0)
  lengths = {len(split_sentences(c)) for _ in range(200) for c in text_crops(caption, 'x', rng, 2, 0, max_sentences=3)}
  assert lengths == {1, 2, 3}
