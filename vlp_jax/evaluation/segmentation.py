"""Zero-shot semantic segmentation: patch embeddings against class text embeddings, scored by mIoU.

Protocol (the papers give no segmentation recipe, so these are our documented choices):
  - Patch embeddings: the ViT's patch tokens go through the same `ln_post` and `proj` as the class token, then L2
    normalisation (`encoder.project_patch_tokens`). This is the plain recipe (MaskCLIP's "naive" baseline);
    MaskCLIP proper would also replace the last block's attention by its value path, which needs a change in the
    model.
  - Class embeddings: the zero-shot ones (templates averaged, `zeroshot.class_embeddings`).
  - Background: its own text class ('background' through the same templates) by default; a float threshold on the
    cosine is the alternative (a patch whose best class cosine does not exceed it is background).
  - Upsampling: bilinear on the patch-grid logits to the mask size, half-pixel centres (align_corners=False, as
    MaskCLIP / mmseg resize the logits), then the argmax. 'nearest' is available too.
  - mIoU: intersection and union accumulated per class over the whole set, mean over the labels that occur in the
    ground truth or the prediction. Labels follow the mask convention: 0 = background, c + 1 = class c; the main
    metric counts background as a class (the PASCAL VOC convention), `segmentation_miou_fg` leaves it out.
ResNet towers have no patch tokens in the joint space: the evaluator returns {} for them.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from vlp_jax.evalsets.prompts import SIMPLE_TEMPLATES
from vlp_jax.evaluation.base import evaluator
from vlp_jax.evaluation.zeroshot import class_embeddings

BACKGROUND_NAMES = ('background',)


def confusion_matrix(pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None = None
                     ) -> np.ndarray:
  """pred, target: same-shape int label maps (e.g. [N, H, W]) -> [K, K] int64 pixel counts, rows the target.

  Pixels whose target is `ignore_index` are left out; every other label must lie in [0, num_classes).
  """
  pred, target = np.asarray(pred), np.asarray(target)
  if pred.shape != target.shape:
    raise ValueError(f'pred {pred.shape} and target {target.shape} differ in shape')
  pred, target = pred.ravel().astype(np.int64), target.ravel().astype(np.int64)
  if ignore_index is not None:
    keep = target != ignore_index
    pred, target = pred[keep], target[keep]
  for name, labels in (('pred', pred), ('target', target)):
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
      raise ValueError(f'{name} has labels outside [0, {num_classes}): [{labels.min()}, {labels.max()}]')
  counts = np.bincount(target * num_classes + pred, minlength=num_classes * num_classes)
  return counts.reshape(num_classes, num_classes)


def iou_from_confusion(confusion: np.ndarray) -> np.ndarray:
  """[K, K] counts -> [K] IoU per class, NaN for a class in neither the target nor the prediction."""
  intersection = np.diag(confusion).astype(np.float64)
  union = confusion.sum(axis=0) + confusion.sum(axis=1) - intersection
  return np.where(union > 0, intersection / np.where(union > 0, union, 1), np.nan)  # expected counts may be < 1


def per_class_iou(pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None = None
                  ) -> np.ndarray:
  """pred, target [N, H, W] int -> [num_classes] IoU accumulated over all images (NaN where a class is absent)."""
  return iou_from_confusion(confusion_matrix(pred, target, num_classes, ignore_index))


def mean_iou(iou: np.ndarray) -> float:
  """Mean over the classes that occur (not NaN); NaN when none does."""
  present = ~np.isnan(iou)
  return float(np.mean(iou[present])) if present.any() else float('nan')


def patch_grid(image_hw: tuple[int, int], num_patches: int) -> tuple[int, int]:
  """(H, W) of the images and P patch tokens -> (grid_h, grid_w) with grid_h * grid_w = P (square patches)."""
  height, width = image_hw
  patch = max(1, round(math.sqrt(height * width / num_patches)))
  grid = (height // patch, width // patch)
  if grid[0] * grid[1] != num_patches:
    raise ValueError(f'{num_patches} patch tokens do not tile a {height}x{width} image with square patches')
  return grid


def segmentation_logits(patch_emb: np.ndarray, class_emb: np.ndarray, background: float | np.ndarray
                        ) -> np.ndarray:
  """Cosine logits per patch, background first.

  patch_emb [N, gh, gw, d] and class_emb [C, d] unit-norm; background: a float threshold, or [B, d] unit-norm
  background text embeddings (the best of them scores the background) -> [N, gh, gw, 1 + C], channel 0 the
  background and channel c + 1 class c, the mask convention.
  """
  class_logits = patch_emb @ class_emb.T
  if np.ndim(background) == 0:
    background_logit = np.full(class_logits.shape[:-1] + (1,), background, class_logits.dtype)
  else:
    background_logit = np.max(patch_emb @ np.asarray(background).T, axis=-1, keepdims=True)
  return np.concatenate([background_logit, class_logits], axis=-1).astype(np.float32)


def _resize_weights(out_size: int, in_size: int, method: str) -> np.ndarray:
  """[out_size, in_size] interpolation matrix with half-pixel centres; edges clamp."""
  centres = (np.arange(out_size) + 0.5) * in_size / out_size
  weights = np.zeros((out_size, in_size), np.float32)
  rows = np.arange(out_size)
  if method == 'nearest':
    weights[rows, np.minimum(centres.astype(np.int64), in_size - 1)] = 1.0
    return weights
  if method != 'bilinear':
    raise ValueError(f"upsample method '{method}' is not valid; valid choices: ['bilinear', 'nearest']")
  source = np.clip(centres - 0.5, 0, in_size - 1)
  low = np.floor(source).astype(np.int64)
  high = np.minimum(low + 1, in_size - 1)
  frac = (source - low).astype(np.float32)
  np.add.at(weights, (rows, low), 1 - frac)
  np.add.at(weights, (rows, high), frac)
  return weights


def upsample_logits(logits: np.ndarray, size: tuple[int, int], method: str = 'bilinear') -> np.ndarray:
  """[N, h, w, K] -> [N, H, W, K] by separable bilinear (or nearest) interpolation, half-pixel centres."""
  rows = _resize_weights(size[0], logits.shape[1], method)  # [H, h]
  cols = _resize_weights(size[1], logits.shape[2], method)  # [W, w]
  x = np.einsum('Hh,nhwk->nHwk', rows, logits, optimize=True)
  return np.einsum('Ww,nHwk->nHWk', cols, x, optimize=True)


def predict_masks(logits: np.ndarray, size: tuple[int, int], method: str = 'bilinear') -> np.ndarray:
  """Patch-grid logits [N, h, w, K] -> [N, H, W] labels (argmax after upsampling; ties go to the lower label)."""
  return np.argmax(upsample_logits(logits, size, method), axis=-1)


def segmentation_confusion(encode_patches: Callable[[np.ndarray], np.ndarray], images: np.ndarray,
                           masks: np.ndarray, class_emb: np.ndarray, background: float | np.ndarray,
                           upsample: str = 'bilinear', chunk: int = 256, upsample_chunk: int = 16,
                           ignore_index: int | None = None) -> np.ndarray:
  """Pixel confusion over a set: [1 + C, 1 + C] counts (rows the ground truth).

  encode_patches: images [n, H, W, 3] -> [n, gh, gw, d] unit-norm; images [N, H, W, 3]; masks [N, Hm, Wm] int
  (0 = background, c + 1 = class c); class_emb [C, d]. Upsampling runs `upsample_chunk` images at a time so that
  the full-resolution logits of the whole set are never held.
  """
  num_labels = class_emb.shape[0] + 1
  logits = np.concatenate([segmentation_logits(encode_patches(images[start:start + chunk]), class_emb, background)
                           for start in range(0, len(images), chunk)])
  confusion = np.zeros((num_labels, num_labels), np.int64)
  for start in range(0, len(images), upsample_chunk):
    pred = predict_masks(logits[start:start + upsample_chunk], masks.shape[1:3], upsample)
    confusion += confusion_matrix(pred, masks[start:start + upsample_chunk], num_labels, ignore_index)
  return confusion


def uniform_random_confusion(confusion: np.ndarray) -> np.ndarray:
  """[K, K] counts -> [K, K] float: the expected confusion of a predictor that labels every pixel uniformly at random
  over the K labels, on the same ground truth (each row's pixels spread evenly over the columns)."""
  return np.repeat(confusion.sum(axis=1, keepdims=True) / confusion.shape[1], confusion.shape[1], axis=1)


def segmentation_scores(confusion: np.ndarray) -> dict[str, float]:
  """[1 + C, 1 + C] counts, label 0 the background -> mIoU with and without the background, pixel accuracy."""
  iou = iou_from_confusion(confusion)
  return {'segmentation_miou': mean_iou(iou), 'segmentation_miou_fg': mean_iou(iou[1:]),
          'segmentation_pixel_acc': float(np.trace(confusion) / max(confusion.sum(), 1))}


def segmentation_metrics(confusion: np.ndarray) -> dict[str, float]:
  """`segmentation_scores`, each with its chance level beside (`<metric>_chance`): the score of a uniformly random
  labelling of the same pixels (`uniform_random_confusion`); pixel accuracy 1 / (1 + C), mIoU the mean over labels
  of p / ((1 + C) p + 1 - p) for a label covering a share p of the pixels."""
  chance = segmentation_scores(uniform_random_confusion(confusion))
  return {**segmentation_scores(confusion), **{f'{name}_chance': value for name, value in chance.items()}}


@evaluator('segmentation', needs=('masks', 'class_names'))
def segmentation_evaluator(encoder, eval_set, image_emb) -> dict[str, float]:
  """Zero-shot segmentation mIoU on an eval set with `masks` ([N, H, W], 0 = background, c + 1 = class c).

  {} when the set has no masks or class names, or the encoder has no patch embeddings (ResNet towers).
  `image_emb` is unused: segmentation needs the patch tokens, not the pooled embedding.
  """
  del image_emb
  masks = getattr(eval_set, 'masks', None)
  if masks is None or not eval_set.class_names or not getattr(encoder, 'has_patch_embeddings', False):
    return {}
  templates = tuple(eval_set.templates) or SIMPLE_TEMPLATES
  class_emb = class_embeddings(encoder.texts, eval_set.class_names, templates)
  background = class_embeddings(encoder.texts, BACKGROUND_NAMES, templates)

  def encode_patches(images: np.ndarray) -> np.ndarray:
    emb = encoder.patch_embeddings(images)  # [n, P, d]
    return emb.reshape(len(images), *patch_grid(images.shape[1:3], emb.shape[1]), emb.shape[-1])

  confusion = segmentation_confusion(encode_patches, eval_set.images, np.asarray(masks), class_emb, background,
                                     chunk=encoder.batch_size)
  return segmentation_metrics(confusion)
