"""ZeroVL's word-level text augmentation (appendix A.9) against a naive reference: words picked from the raw caption,
masked / replaced / deleted as planned, untouched words with exactly the BPE ids of the whole caption's tokenisation."""
import numpy as np
import pytest

from vlp_jax.data.text import text_augment as text_lib
from vlp_jax.data.text.clip_bpe import default_tokenizer

CAPTIONS = [
    'a red circle and a blue square on a gray background',
    'A Red-Circle, next to an UNBELIEVABLY large   star!!',  # case, punctuation, multi-piece words, spaces
    "it's a dog's life (photo: 2019)",
    'Café déjà-vu &amp; naïve résumé',  # non-ASCII and an HTML entity (CLIP's cleaning)
    'sketch of a star',
    'x',
    '',
    '   ',
]


def naive_augment(caption, plan, replacements, context_length):
  """The paper's procedure, word by word: split the caption on whitespace; a masked word becomes one mask token, a
  replaced one its replacement, a deleted one nothing, and an untouched one the BPE ids it has in the tokenisation of
  the whole caption. Then [SOT] + ids + [EOT], cut to the context with EOT last, padded with 0."""
  tokenizer = default_tokenizer()
  words = caption.split()
  whole = tokenizer.encode(caption)
  spans, start = [], 0  # where each word's ids sit in the whole caption's ids
  for word in words:
    count = len(tokenizer.encode(word))
    spans.append(whole[start:start + count])
    start += count
  assert start == len(whole)
  ids = []
  for span, action, replacement in zip(spans, plan, replacements):
    if action == text_lib.KEEP:
      ids += span
    elif action == text_lib.MASK:
      ids.append(text_lib.MASK_TOKEN)
    elif action == text_lib.REPLACE:
      ids.append(int(replacement))
  ids = ids[:context_length - 2]
  row = [text_lib.SOT_TOKEN] + ids + [text_lib.EOT_TOKEN]
  return np.array(row + [0] * (context_length - len(row)), np.int32)


def _plan_and_replacements(words, seed, prob, split=(0.5, 0.1, 0.4)):
  """The plan and the replacement ids that TextAugment draws from default_rng(seed), in its documented order."""
  rng = np.random.default_rng(seed)
  plan = text_lib.augment_plan(len(words), rng, prob, split)
  uniforms = rng.random(len(words))
  vocabulary = text_lib.word_tokens()
  return plan, vocabulary[(uniforms * len(vocabulary)).astype(int)]


def test_untouched_captions_are_the_tokenizer_rows():
  augment = text_lib.TextAugment(prob=0.0)
  for caption in CAPTIONS + ['word ' * 40]:  # the last one truncated: EOT in the last slot
    for length in (8, 77):
      got = augment(caption, np.random.default_rng(0), length)
      np.testing.assert_array_equal(got, default_tokenizer()(caption, context_length=length)[0])
      assert got.dtype == np.int32


@pytest.mark.parametrize('length', [12, 77])
def test_matches_the_naive_word_level_reference(length):
  augment = text_lib.TextAugment(prob=0.5)
  tokenizer = default_tokenizer()
  counts = np.zeros(4, int)
  for caption in CAPTIONS:
    words = text_lib.caption_words(caption)
    assert words == caption.lower().split() or not caption.isascii()
    for seed in range(40):
      plan, replacements = _plan_and_replacements(words, seed, 0.5)
      got = augment(caption, np.random.default_rng(seed), length)
      np.testing.assert_array_equal(got, naive_augment(' '.join(words), plan, replacements, length))
      counts += np.bincount(plan, minlength=4)
      if length == 77:  # nothing truncated: count what the plan says
        content = got[1:got.argmax()]
        assert (content == text_lib.MASK_TOKEN).sum() == (plan == text_lib.MASK).sum()  # one mask per masked word
        kept = sum(len(tokenizer.encode(w)) for w, a in zip(words, plan) if a == text_lib.KEEP)
        assert len(content) == kept + ((plan == text_lib.MASK) | (plan == text_lib.REPLACE)).sum()  # deleted: gone
        left = tokenizer.decode(content[(content != text_lib.MASK_TOKEN) & ~np.isin(content, replacements)])
        for word, action in zip(words, plan):
          if action == text_lib.DELETE and words.count(word) == 1:
            assert word not in left.split()
  assert counts[1:].all()  # every action happened


def test_a_masked_word_is_one_mask_token_whatever_its_pieces():
  caption = 'an unbelievably large red-circle, tessellated'
  words = caption.split()
  assert len(default_tokenizer().encode(caption)) > len(words)  # several words are more than one BPE piece
  got = text_lib.TextAugment(prob=1.0, mask=1.0, replace=0.0, delete=0.0)(caption, np.random.default_rng(0), 16)
  want = [text_lib.SOT_TOKEN] + [text_lib.MASK_TOKEN] * len(words) + [text_lib.EOT_TOKEN]
  np.testing.assert_array_equal(got, want + [0] * (16 - len(want)))
  deleted = text_lib.TextAugment(prob=1.0, mask=0.0, replace=0.0, delete=1.0)(caption, np.random.default_rng(0), 16)
  np.testing.assert_array_equal(deleted, [text_lib.SOT_TOKEN, text_lib.EOT_TOKEN] + [0] * 14)
  replaced = text_lib.TextAugment(prob=1.0, mask=0.0, replace=1.0, delete=0.0)(caption, np.random.default_rng(0), 16)
  assert replaced.argmax() == len(words) + 1  # one vocabulary word per replaced word
  assert np.isin(replaced[1:len(words) + 1], text_lib.word_tokens()).all()


def test_plan_proportions():
  rng = np.random.default_rng(1)
  plans = np.concatenate([text_lib.augment_plan(n, rng) for n in rng.integers(0, 30, 2000)])
  picked = plans > 0
  np.testing.assert_allclose(picked.mean(), 0.2, atol=0.01)
  actions = np.bincount(plans[picked], minlength=4)[1:] / picked.sum()
  np.testing.assert_allclose(actions, [0.5, 0.1, 0.4], atol=0.02)


def test_deterministic_per_rng_and_rows_stay_valid():
  augment = text_lib.TextAugment(prob=0.5)
  for caption in CAPTIONS:
    rows = [augment(caption, np.random.default_rng(seed), 12) for seed in range(20)]
    np.testing.assert_array_equal(rows[3], augment(caption, np.random.default_rng(3), 12))
    for row in rows:
      eot = row.argmax()
      assert row[0] == text_lib.SOT_TOKEN and row[eot] == text_lib.EOT_TOKEN and not row[eot + 1:].any()
      assert (row == text_lib.SOT_TOKEN).sum() == 1 and (row == text_lib.EOT_TOKEN).sum() == 1
  rows = {tuple(augment(CAPTIONS[0], np.random.default_rng(seed), 24)) for seed in range(20)}
  assert len(rows) > 10  # the rng matters


def test_vocabulary_words_and_the_mask():
  tokenizer, vocabulary = default_tokenizer(), text_lib.word_tokens()
  assert 30000 < len(vocabulary) < text_lib.SOT_TOKEN
  assert not np.isin([text_lib.MASK_TOKEN, text_lib.SOT_TOKEN, text_lib.EOT_TOKEN], vocabulary).any()
  for token in np.random.default_rng(0).choice(vocabulary, 200):
    word = tokenizer.decode([token])
    assert word and len(word.split()) == 1 and tokenizer.encode(word) == [token]
  # The mask id (byte 0xFF) is never produced by text, not even by 'ÿ' (U+00FF, which UTF-8 encodes as C3 BF).
  every_char = ' '.join(chr(c) + chr(c + 1) for c in range(33, 0x800, 2))
  assert text_lib.MASK_TOKEN not in tokenizer.encode(every_char + ' ÿ ÿÿ')
