"""Referring expressions (SigLIP 2 §3.4.1's RefCOCO, on an eval set with regions: the embedded dataset with
config.data.synthetic.regions): for every (image, region description) pair, predict the region's box and score it by
Acc@0.5 (the fraction of boxes with IoU >= 0.5 against the true box) and by the mean IoU.

Two routes, each reported where it applies, beside chance:
  decoder  a model trained with LocCa's decoder (its parameters at params[locca.PARAMS_NAME]) reads the 'aref'
           prefix [AREF] description [SEP] and greedily emits the 4 coordinate tokens, each step restricted to the
           coordinate ids (data/text/locca_tasks.py); the box is their bins' centres.
  probe    any model: a ridge regression, fitted on the train split's regions, from frozen features of the pair to
           the box (xmin, ymin, xmax, ymax). The features: the image tower's pooled feature (before the projection),
           the description's text embedding and, for a ViT, the map of cosine similarities between the description
           and each patch embedding, which says where in the image the text is. The SigLIP control has no decoder,
           so this is its number; a decoder-trained model gets both.
  chance   the train split's mean box (the eval set's where it has no train split) predicted for every pair.
Metrics: referring_{decoder,probe,chance}_{acc50,miou}.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vlp_jax import parallel
from vlp_jax.data.text import locca_tasks
from vlp_jax.evaluation.base import evaluator
from vlp_jax.evaluation.linear_probe import RIDGE_HOLDOUT_FRACTION, RIDGE_L2_GRID, ridge_fit, standardize
from vlp_jax.models import locca

IOU_THRESHOLD = 0.5
DECODE_CHUNK = 64  # pairs per decoder call: its logits are [chunk, L, V]


def box_area(box: np.ndarray) -> np.ndarray:
  """[..., 4] boxes -> [...] areas; 0 for a box with max < min on either axis."""
  return np.clip(box[..., 2] - box[..., 0], 0, None) * np.clip(box[..., 3] - box[..., 1], 0, None)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """a, b: [..., 4] boxes (xmin, ymin, xmax, ymax) -> [...] intersection over union; a box with max < min is empty,
  and two empty boxes have IoU 0."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  low, high = np.maximum(a[..., :2], b[..., :2]), np.minimum(a[..., 2:], b[..., 2:])
  inter = np.prod(np.clip(high - low, 0, None), axis=-1)
  union = box_area(a) + box_area(b) - inter
  return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def box_scores(predicted: np.ndarray, true: np.ndarray, route: str) -> dict[str, float]:
  """[M, 4], [M, 4] -> {'referring_<route>_acc50': fraction with IoU >= 0.5, 'referring_<route>_miou': mean IoU}."""
  iou = box_iou(predicted, true)
  return {f'referring_{route}_acc50': float(np.mean(iou >= IOU_THRESHOLD)),
          f'referring_{route}_miou': float(np.mean(iou))}


def region_pairs(regions: Sequence) -> tuple[np.ndarray, np.ndarray, list[str]]:
  """Per image records.Regions -> (the image of each pair [M] int, its true box [M, 4], its description, M strings),
  every region of every image in order."""
  image = [i for i, r in enumerate(regions) for _ in r.texts]
  boxes = [np.asarray(r.boxes, np.float32).reshape(-1, 4) for r in regions]
  return (np.asarray(image, np.int64), np.concatenate(boxes) if boxes else np.zeros((0, 4), np.float32),
          [text for r in regions for text in r.texts])


# ------------------------------------------------------------------------------------------ the decoder route


def aref_prefixes(texts: Sequence[str], layout: locca_tasks.LoccaLayout, encode: Callable[[str], list[int]]
                  ) -> tuple[np.ndarray, np.ndarray]:
  """Descriptions -> (decoder inputs [M, L] int32: [AREF] description [SEP], then padding; each prefix's length [M]).
  The description is cut as in training, so that the 4 box ids fit after it."""
  inputs = np.full((len(texts), layout.length), layout.pad_id, np.int32)
  lengths = np.zeros(len(texts), np.int32)
  for m, text in enumerate(texts):
    ids, condition = locca_tasks.aref_sequence(layout.text(encode(text)), np.zeros(4), layout)
    inputs[m, :condition], lengths[m] = ids[:condition], condition
  return inputs, lengths


def greedy_box_bins(logits_fn: Callable[[jax.Array], jax.Array], inputs: jax.Array, prefix_lengths: jax.Array,
                    first_coordinate: int, bins: int) -> jax.Array:
  """Greedy decoding of the 4 coordinate tokens after each prefix. logits_fn: inputs [M, L] -> logits [M, L, V];
  inputs [M, L] hold the prefixes (prefix_lengths [M], each at most L - 4) -> [M, 4] int32 bins: at step k the
  argmax over the coordinate ids [first_coordinate, first_coordinate + bins) of the logits at position
  prefix_length - 1 + k, fed back as the input at prefix_length + k."""
  rows = jnp.arange(inputs.shape[0])
  chosen = []
  for k in range(locca_tasks.BOX_TOKENS):
    logits = logits_fn(inputs)[rows, prefix_lengths - 1 + k]  # [M, V]
    choice = jnp.argmax(logits[:, first_coordinate:first_coordinate + bins], axis=-1).astype(jnp.int32)
    inputs = inputs.at[rows, prefix_lengths + k].set(first_coordinate + choice)
    chosen.append(choice)
  return jnp.stack(chosen, axis=1)


def decoder_layout(tokenizer, decoder: locca.LoccaDecoder, text_ids: Sequence[int] = ()) -> locca_tasks.LoccaLayout:
  """The layout a trained decoder was built for, over the tokenizer's ids or, given the `text_ids` it was trained
  with (its variables' locca.VOCABULARY_NAME), over those: its output vocabulary beyond the text ids and the special
  tokens holds the coordinate bins."""
  layout = locca_tasks.tokenizer_layout(tokenizer, box_bins=2, length=decoder.length, text_ids=text_ids)
  bins = decoder.vocab_size - layout.text_vocab_size - len(locca_tasks.SPECIAL_TOKENS)
  return dataclasses.replace(layout, box_bins=bins)


def decoder_text_ids(variables: dict) -> list[int]:
  """The text ids a decoder was trained over (its variables' locca.VOCABULARY_NAME); [] for the tokenizer's."""
  vocabulary = variables.get(locca.VOCABULARY_NAME)
  return [] if vocabulary is None else np.asarray(jax.device_get(vocabulary['text_ids'])).tolist()


def trained_decoder(encoder, decoder_params: dict, text_ids: Sequence[int] = ()
                    ) -> tuple[locca.LoccaDecoder, locca_tasks.LoccaLayout]:
  """The decoder module of `decoder_params` (its depth read from them) and the layout it was trained with."""
  model = encoder.model
  decoder = locca.decoder_from_params(model.text, decoder_params, model.act, model.dtype)
  return decoder, decoder_layout(encoder.tokenizer, decoder, text_ids)


def decoder_boxes(encoder, decoder_params: dict, images: np.ndarray, image_index: np.ndarray, texts: list[str],
                  text_ids: Sequence[int] = ()) -> np.ndarray:
  """The decoder route's boxes [M, 4] (fractions) for the pairs (image_index [M], texts [M]) of `images`; `text_ids`:
  the decoder's text vocabulary where it is not the tokenizer's (`decoder_layout`)."""
  decoder, layout = trained_decoder(encoder, decoder_params, text_ids)
  inputs, lengths = aref_prefixes(texts, layout, encoder.tokenizer.encode)
  tokens = encoder.image_tokens(images)  # [N, P, w]
  params = jax.device_get(decoder_params)

  @jax.jit
  def decode(image_tokens, ids, prefix_lengths):
    logits_fn = lambda x: decoder.apply({'params': params}, image_tokens, x)  # noqa: E731
    return greedy_box_bins(logits_fn, ids, prefix_lengths, layout.first_coordinate, layout.box_bins)
  chosen = []
  for start in range(0, len(texts), DECODE_CHUNK):
    rows = slice(start, start + DECODE_CHUNK)
    count = len(texts[rows])
    chunk = [parallel.pad_rows(x, DECODE_CHUNK) for x in (tokens[image_index[rows]], inputs[rows], lengths[rows])]
    chosen.append(np.asarray(decode(*chunk))[:count])
  return locca_tasks.dequantize_box(np.concatenate(chosen), layout.box_bins)


# ------------------------------------------------------------------------------------------ the probe route


def probe_features(encoder, images: np.ndarray, image_index: np.ndarray, texts: list[str]) -> np.ndarray:
  """[M, f] frozen features of the pairs: the image feature [w], the description's embedding [d] and, for a ViT, its
  cosine similarity to each patch embedding [P]."""
  text = encoder.texts(texts)  # [M, d]
  parts = [encoder.image_features(images)[image_index], text]
  if encoder.has_patch_embeddings:
    patches = encoder.patch_embeddings(images)  # [N, P, d]
    parts.append(np.einsum('mpd,md->mp', patches[image_index], text))
  return np.concatenate(parts, axis=1)


def fit_box_probe(train_x: np.ndarray, train_boxes: np.ndarray, test_x: np.ndarray, seed: int = 0,
                  l2_grid: Sequence[float] = RIDGE_L2_GRID) -> np.ndarray:
  """Ridge regression from standardised features train_x [N, f] to boxes [N, 4]; -> boxes of test_x [M, 4], clipped
  to [0, 1]. The L2 strength (per example, as the linear probe's grid) is the one with the best mean IoU on a random
  20% of the train pairs (ties: the stronger), then the fit is redone on all of them."""
  train_x, test_x = standardize(train_x, test_x)
  train_boxes = np.asarray(train_boxes, np.float64)
  count = len(train_x)
  held_out = np.zeros(count, bool)
  held_out[np.random.default_rng(seed).permutation(count)[:round(RIDGE_HOLDOUT_FRACTION * count)]] = True
  l2 = l2_grid[-1]
  if len(l2_grid) > 1 and 0 < held_out.sum() < count:
    fits = ridge_fit(train_x[~held_out], train_boxes[~held_out], [g * (~held_out).sum() for g in l2_grid])
    mious = [np.mean(box_iou(np.clip(train_x[held_out] @ w + b, 0, 1), train_boxes[held_out])) for w, b in fits]
    l2 = l2_grid[len(l2_grid) - 1 - int(np.argmax(mious[::-1]))]
  w, b = ridge_fit(train_x, train_boxes, [l2 * count])[0]
  return np.clip(test_x @ w + b, 0.0, 1.0)


@evaluator('referring', needs=('regions',))
def referring(encoder, eval_set, image_emb: np.ndarray) -> dict[str, float]:
  """The registry's evaluator (the module docstring): the decoder route where the variables have a decoder, the
  probe and chance where the set has train regions (chance from the eval set's own boxes otherwise)."""
  del image_emb
  image_index, boxes, texts = region_pairs(eval_set.regions)
  if not texts:
    return {}
  results = {}
  train_regions = getattr(eval_set, 'train_regions', None)
  if train_regions:
    train_index, train_boxes, train_texts = region_pairs(train_regions)
    predicted = fit_box_probe(probe_features(encoder, eval_set.train_images, train_index, train_texts), train_boxes,
                              probe_features(encoder, eval_set.images, image_index, texts))
    results.update(box_scores(predicted, boxes, 'probe'))
    mean_box = train_boxes.mean(axis=0)
  else:
    mean_box = boxes.mean(axis=0)
  results.update(box_scores(np.broadcast_to(mean_box, boxes.shape), boxes, 'chance'))
  decoder_params = encoder.variables['params'].get(locca.PARAMS_NAME)
  if decoder_params is not None:
    results.update(box_scores(decoder_boxes(encoder, decoder_params, eval_set.images, image_index, texts,
                                            decoder_text_ids(encoder.variables)), boxes, 'decoder'))
  return results
