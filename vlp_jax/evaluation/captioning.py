"""Captioning quality of a model trained with LocCa's decoder (SigLIP 2 §2.2; LocCa, arXiv 2403.19596): the decoder
reads the [CAP] prefix and greedily writes a caption for each eval image (data/text/locca_tasks.py's layout), which is
scored against that image's own captions.

Metrics (captioning_*, with `<metric>_chance` beside each):
  cider  CIDEr-D (Vedantam et al., CVPR 2015, arXiv 1411.5726), times 10 as the papers report it: per n-gram order
         1-4, the cosine similarity of TF-IDF vectors (document frequencies over the eval images' reference sets),
         the candidate's weights clipped at the reference's, times a Gaussian length penalty (sigma 6); averaged over
         the orders and the image's references, then over the images. As the authors' coco-caption code computes it,
         including its length: the number of bigrams.
  exact  the fraction of images whose caption equals one of its references, word for word.
  chance the eval set's most frequent caption written for every image (a constant captioner that knows the test
         set's captions: an upper bound on what ignoring the image gives).
Words: lowercase runs of letters and digits (coco-caption tokenises with the PTB tokenizer and drops punctuation).
A model without a decoder gets no captioning metrics.
"""
from __future__ import annotations

import collections
import math
import re
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vlp_jax import parallel
from vlp_jax.data.text import locca_tasks
from vlp_jax.evaluation.base import evaluator
from vlp_jax.evaluation.referring import DECODE_CHUNK, decoder_text_ids, trained_decoder
from vlp_jax.models import locca

CIDER_ORDERS = 4
CIDER_SIGMA = 6.0
CIDER_SCALE = 10.0


def caption_words(text: str) -> list[str]:
  """'A red circle, left.' -> ['a', 'red', 'circle', 'left']."""
  return re.findall(r'[a-z0-9]+', text.lower())


def ngram_counts(words: Sequence[str], orders: int = CIDER_ORDERS) -> collections.Counter:
  """Counts of every n-gram (a tuple of words) of orders 1..`orders`."""
  return collections.Counter(tuple(words[i:i + n]) for n in range(1, orders + 1) for i in range(len(words) - n + 1))


def cider_d(candidates: Sequence[str], references: Sequence[Sequence[str]], orders: int = CIDER_ORDERS,
            sigma: float = CIDER_SIGMA) -> np.ndarray:
  """CIDEr-D of each candidate caption [M] against its image's reference captions (references [M] lists, none
  empty) -> [M] float64 scores (the module docstring). The document frequencies come from these M reference sets."""
  if len(candidates) != len(references) or any(not refs for refs in references):
    raise ValueError(f'CIDEr-D needs one non-empty reference list per candidate; got {len(candidates)} candidates '
                     f'and reference lists of sizes {sorted({len(refs) for refs in references})}')
  reference_counts = [[ngram_counts(caption_words(ref), orders) for ref in refs] for refs in references]
  document_frequency = collections.Counter(gram for refs in reference_counts for gram in set().union(*refs))
  log_images = math.log(len(references))

  def tfidf(counts: collections.Counter) -> tuple[list[dict], np.ndarray, int]:
    vectors = [{} for _ in range(orders)]
    for gram, count in counts.items():
      vectors[len(gram) - 1][gram] = count * (log_images - math.log(max(1.0, document_frequency[gram])))
    norms = np.array([math.sqrt(sum(v * v for v in vector.values())) for vector in vectors])
    bigrams = sum(count for gram, count in counts.items() if len(gram) == 2)
    return vectors, norms, bigrams

  scores = np.zeros(len(candidates))
  for m, (candidate, refs) in enumerate(zip(candidates, reference_counts)):
    vectors, norms, length = tfidf(ngram_counts(caption_words(candidate), orders))
    total = np.zeros(orders)
    for ref in refs:
      ref_vectors, ref_norms, ref_length = tfidf(ref)
      penalty = math.exp(-((length - ref_length) ** 2) / (2 * sigma ** 2))
      for n in range(orders):
        overlap = sum(min(v, ref_vectors[n].get(g, 0.0)) * ref_vectors[n].get(g, 0.0) for g, v in vectors[n].items())
        if norms[n] and ref_norms[n]:
          overlap /= norms[n] * ref_norms[n]
        total[n] += overlap * penalty
    scores[m] = CIDER_SCALE * total.mean() / len(refs)
  return scores


def exact_matches(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
  """[M] bool: candidate m's words equal those of one of references[m]."""
  return np.array([caption_words(c) in [caption_words(r) for r in refs] for c, refs in zip(candidates, references)])


def greedy_caption_ids(logits_fn: Callable[[jax.Array], jax.Array], inputs: jax.Array, allowed: jax.Array
                       ) -> jax.Array:
  """Greedy decoding after a one-id prefix. logits_fn: ids [M, L] -> logits [M, L, V] (causal); inputs [M, L] hold
  the prefix at position 0 (the rest is overwritten); allowed [V] bool -> [M, L] int32 ids: position k + 1 holds the
  argmax over the allowed ids of the logits at position k, fed back as the input there."""

  def step(k, ids):
    logits = jax.lax.dynamic_index_in_dim(logits_fn(ids), k, axis=1, keepdims=False)  # [M, V]
    choice = jnp.argmax(jnp.where(allowed, logits, -jnp.inf), axis=-1).astype(ids.dtype)
    return jax.lax.dynamic_update_slice(ids, choice[:, None], (0, k + 1))
  return jax.lax.fori_loop(0, inputs.shape[1] - 1, step, inputs.astype(jnp.int32))


def decoder_captions(encoder, decoder_params: dict, images: np.ndarray, text_ids: Sequence[int] = ()) -> list[str]:
  """The decoder's greedy caption of each image [N]: [CAP], then text ids (never padding) up to the end id or the
  decoder's length; `text_ids` as referring.decoder_layout takes them (UNK ids are left out of the text)."""
  decoder, layout = trained_decoder(encoder, decoder_params, text_ids)
  allowed = np.zeros(decoder.vocab_size, bool)
  allowed[:layout.text_vocab_size] = True
  allowed[layout.pad_id] = False
  tokens = encoder.image_tokens(images)  # [N, P, w]
  params = jax.device_get(decoder_params)

  @jax.jit
  def decode(image_tokens, ids):
    return greedy_caption_ids(lambda x: decoder.apply({'params': params}, image_tokens, x), ids, allowed)
  prefix = np.full((DECODE_CHUNK, layout.length), layout.pad_id, np.int32)
  prefix[:, 0] = layout.token('cap')
  captions = []
  for start in range(0, len(images), DECODE_CHUNK):
    chunk = tokens[start:start + DECODE_CHUNK]
    ids = np.asarray(decode(parallel.pad_rows(chunk, DECODE_CHUNK), prefix))[:len(chunk), 1:]
    captions += [caption_text(row, layout, encoder.tokenizer.decode) for row in ids]
  return captions


def caption_text(ids: np.ndarray, layout: locca_tasks.LoccaLayout, decode: Callable[[list[int]], str]) -> str:
  """The decoder's text ids written after [CAP] (ids [L']) -> the caption: the ids before the first end id, as the
  tokenizer's ids (through `layout.text_ids` where the decoder has its own; UNK, which has no text, left out),
  decoded by `decode`."""
  ends = np.flatnonzero(ids == layout.eos_id)
  written = [int(i) for i in ids[:ends[0] if len(ends) else len(ids)]]
  if layout.text_ids:
    written = [layout.text_ids[i] for i in written if i < len(layout.text_ids)]
  return decode(written)


def image_references(captions: Sequence[str], caption_image: np.ndarray, num_images: int) -> list[list[str]]:
  """Each image's captions [num_images] lists (empty for an image without one)."""
  references = [[] for _ in range(num_images)]
  for caption, image in zip(captions, caption_image):
    references[int(image)].append(caption)
  return references


def caption_scores(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
  """{captioning_cider, captioning_exact}: the candidates' mean CIDEr-D and exact-match rate."""
  return {'captioning_cider': float(cider_d(candidates, references).mean()),
          'captioning_exact': float(exact_matches(candidates, references).mean())}


@evaluator('captioning', needs=('captions',))
def captioning(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """The registry's evaluator (the module docstring), on the images that have captions; {} without a decoder."""
  del image_emb
  decoder_params = encoder.variables['params'].get(locca.PARAMS_NAME)
  if decoder_params is None:
    return {}
  references = image_references(eval_set.captions, eval_set.caption_image, len(eval_set.images))
  written = decoder_captions(encoder, decoder_params, eval_set.images, decoder_text_ids(encoder.variables))
  written, references = zip(*[(caption, refs) for caption, refs in zip(written, references) if refs])
  most_frequent = collections.Counter(eval_set.captions).most_common(1)[0][0]
  chance = caption_scores([most_frequent] * len(references), references)
  return {**caption_scores(written, references), **{f'{name}_chance': value for name, value in chance.items()}}
