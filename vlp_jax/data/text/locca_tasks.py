"""LocCa's three decoder tasks as token arrays (LocCa, arXiv 2403.19596; as used by SigLIP 2, arXiv 2502.14786 §2.2).

Per image the decoder reads one sequence per task (SigLIP 2 §2.2: one decoder pass each):
  cap:  [CAP]  caption                  [EOS]   the whole-image caption
  aref: [AREF] description [SEP] box    [EOS]   automatic referring expression: a region's text -> its box
  gcap: [GCAP] box [SEP] description    [EOS]   grounded captioning: a box -> its region's text
`box` is four coordinate tokens (xmin, ymin, xmax, ymax), each a bin of `box_bins` equal bins of the image side.
The task token doubles as the start token: teacher forcing feeds the sequence without its last id and predicts it
without its first. The loss covers every predicted id after the task token (LocCa's default, which also teaches aref
the description and gcap the box); with `loss_on_condition=False`, only what follows the [SEP] of aref and gcap.

The decoder's output vocabulary (`LoccaLayout`) is the text ids, then the four special tokens (CAP, AREF, GCAP,
SEP), then the `box_bins` coordinate tokens; its input vocabulary has one more id, MASK, the input of CapPa's parallel
prediction (every input id replaced by MASK, attention not causal; models/locca.py). The text ids are the text
tokenizer's, all of them (the papers'), or, as a scale adaptation, only those of a given list (`text_ids`: the ids
the training texts use), each renumbered by its place in the list, and one UNK id for every other: a decoder over
a 49k-token vocabulary is dozens of times a tiny model's step, almost all of it the logits.
Dedicated coordinate tokens (not integers spelt with the text tokenizer, as LocCa's paper does) keep a box at
exactly four ids whatever the tokenizer; LocCa reports the two about equal (digest ../shared/SIGLIP2.md §2).

Regions come from records.decode_regions: boxes as fractions of the original image's sides. The decoder reads the
image the views make of it (the model family's resize, config.model.preprocess: OpenAI CLIP's shorter side and centre
square, or SigLIP's square resize), so the boxes go through the same geometry (`regions_in_view`): on a non-square
image the centre crop cuts the longer side, and a box is re-expressed as fractions of what is kept; a square resize
keeps every box as it is. Random crops and augmentations (config.data.crop_scale,
config.data.augment) move pixels the boxes cannot follow: `check_box_geometry` refuses them with location tasks.
Pure numpy; every random choice (which region each task reads, which caption rows predict in parallel) comes from
the rng given.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import numpy as np

from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, ImagePreprocessing, centre_crop_geometry
from vlp_jax.data.storage.record_needs import RecordNeed
from vlp_jax.data.storage.records import Regions
from vlp_jax.errors import ConfigError

TASKS = ('cap', 'aref', 'gcap')
LOCATION_TASKS = ('aref', 'gcap')  # the tasks that read a record's regions
# A region keeps its description only while this much of its box stays in the view: a box mostly cropped away would
# pair the description with a sliver of the object.
MIN_VISIBLE_FRACTION = 0.5
SPECIAL_TOKENS = ('cap', 'aref', 'gcap', 'sep')  # their ids follow the text vocabulary, in this order
BOX_TOKENS = 4  # xmin, ymin, xmax, ymax
# The ids aref and gcap spend besides their text: task token, box, separator, end.
REGION_TASK_OVERHEAD = 1 + BOX_TOKENS + 1 + 1


@dataclasses.dataclass(frozen=True)
class LoccaLayout:
  """Where each kind of id lies in the decoder's vocabulary, and the sequences' shape.

  text_vocab_size: the decoder's text ids [0, text_vocab_size).
  eos_id, pad_id: the decoder's ids of the tokenizer's end and padding ids (positions outside the loss mask hold
    pad_id).
  box_bins: coordinate bins per axis (LocCa quantises boxes; SIGLIP2.md §8 suggests a small grid for 32-px scenes,
    where a bin finer than a pixel says nothing more).
  length: L, the decoder's sequence length (inputs and targets alike).
  loss_on_condition: the loss also covers aref's description and gcap's box (LocCa's default).
  text_ids: () when the decoder's text ids are the tokenizer's; else the tokenizer id of each decoder text id but
    the last, which is UNK, the decoder's id of every tokenizer id not in the tuple (text_vocab_size =
    len(text_ids) + 1).
  """
  text_vocab_size: int
  eos_id: int
  pad_id: int
  box_bins: int = 32
  length: int = 32
  loss_on_condition: bool = True
  text_ids: tuple[int, ...] = ()

  def __post_init__(self):
    if self.box_bins < 2:
      raise ConfigError(f'the LocCa box_bins must be at least 2, got {self.box_bins}')
    if self.length < REGION_TASK_OVERHEAD:
      raise ConfigError(f'the LocCa decoder length {self.length} leaves no room for a region description: aref and '
                        f'gcap need {REGION_TASK_OVERHEAD} ids besides it; use a length of at least '
                        f'{REGION_TASK_OVERHEAD + 1}')

  @functools.cached_property
  def _decoder_id(self) -> dict[int, int]:
    return {int(t): k for k, t in enumerate(self.text_ids)}

  def text(self, tokenizer_ids: Sequence[int]) -> list[int]:
    """Tokenizer ids -> the decoder's text ids: the same ids, or with `text_ids` each one's index there (UNK,
    len(text_ids), for one not there)."""
    if not self.text_ids:
      return [int(t) for t in tokenizer_ids]
    unknown = len(self.text_ids)
    return [self._decoder_id.get(int(t), unknown) for t in tokenizer_ids]

  def token(self, special: str) -> int:
    """The id of a special token (SPECIAL_TOKENS)."""
    return self.text_vocab_size + SPECIAL_TOKENS.index(special)

  @property
  def first_coordinate(self) -> int:
    return self.text_vocab_size + len(SPECIAL_TOKENS)

  @property
  def output_vocab_size(self) -> int:
    """Text ids, special tokens and coordinate tokens: the width of the decoder's logits."""
    return self.first_coordinate + self.box_bins

  @property
  def mask_id(self) -> int:
    """Parallel prediction's input id: an input-only row of the decoder's embedding."""
    return self.output_vocab_size

  @property
  def input_vocab_size(self) -> int:
    return self.output_vocab_size + 1


def tokenizer_layout(tokenizer, box_bins: int = 32, length: int = 32, loss_on_condition: bool = True,
                     text_ids: Sequence[int] = ()) -> LoccaLayout:
  """The layout over a text tokenizer's ids (`vocab_size`, `eot_token`, `pad_token`: data/text/tokenizer_factory.py's):
  all of them, or, given `text_ids`, those ids and the end and padding ids (sorted; an UNK id for the rest)."""
  if not len(text_ids):
    return LoccaLayout(text_vocab_size=tokenizer.vocab_size, eos_id=tokenizer.eot_token, pad_id=tokenizer.pad_token,
                       box_bins=box_bins, length=length, loss_on_condition=loss_on_condition)
  kept = tuple(sorted({int(t) for t in text_ids} | {int(tokenizer.eot_token), int(tokenizer.pad_token)}))
  if kept[0] < 0 or kept[-1] >= tokenizer.vocab_size:
    raise ValueError(f'decoder text ids must be ids of the tokenizer, in [0, {tokenizer.vocab_size}); got '
                     f'{kept[0]} to {kept[-1]}')
  return LoccaLayout(text_vocab_size=len(kept) + 1, eos_id=kept.index(int(tokenizer.eot_token)),
                     pad_id=kept.index(int(tokenizer.pad_token)), box_bins=box_bins, length=length,
                     loss_on_condition=loss_on_condition, text_ids=kept)


def location_tasks(tasks: Sequence[str]) -> list[str]:
  """The tasks of `tasks` that read regions."""
  return [t for t in tasks if t in LOCATION_TASKS]


def regions_need(tasks: Sequence[str], objective: str) -> list[RecordNeed]:
  """What the decoder tasks `tasks` of `objective` (its registered name) need of the records
  (data/storage/record_needs.py): regions, on at least some records, when a location task is among them."""
  location = location_tasks(tasks)
  if not location:
    return []
  return [RecordNeed('regions', f"config.objective.name='{objective}' with decoder_tasks={tuple(tasks)}",
                     f'the location tasks {location} train on regions (boxes with descriptions), and records '
                     'without any run their decoder passes for nothing. Train on records with regions (docs/data.md), '
                     "or drop those tasks: --config.objective.decoder_tasks=\"('cap',)\"", min_fraction=0.0)]


def check_box_geometry(tasks: Sequence[str], data) -> None:
  """ConfigError naming the key when the image views of `data` (config.data) move pixels in ways the boxes of the
  location tasks among `tasks` cannot follow: a random resized crop (data.crop_scale) or an augmentation policy
  (data.augment, whose shears, rotations and translations move the image)."""
  location = location_tasks(tasks)
  if not location:
    return
  if tuple(data.crop_scale):
    raise ConfigError(f'config.data.crop_scale={tuple(data.crop_scale)} crops the image at random, and the boxes of '
                      f'the location tasks {location} (config.objective.decoder_tasks) would no longer match it; '
                      "use config.data.crop_scale=() (resize and centre crop), or decoder_tasks=('cap',)")
  if data.augment != 'none':
    raise ConfigError(f"config.data.augment='{data.augment}' moves the image's pixels, and the boxes of the location "
                      f'tasks {location} (config.objective.decoder_tasks) would no longer match them; use '
                      "config.data.augment='none', or decoder_tasks=('cap',)")


def view_window(height: int, width: int, size: int,
                preprocessing: ImagePreprocessing = OPENAI_CLIP_PREPROCESSING) -> np.ndarray:
  """The part of an [height, width] image that `preprocessing.resize_image(image, size)` keeps -> [4] float64 (xmin,
  ymin, xmax, ymax) as fractions of the image's width and height: all of it for a square resize ('squash'), else
  the centre square of the shorter-side resize (image_ops.centre_crop_geometry, the longer side truncated as it is
  computed there)."""
  if (height, width) == (size, size) or preprocessing.resize == 'squash':
    return np.array([0.0, 0.0, 1.0, 1.0])
  new_h, new_w, top, left = centre_crop_geometry(height, width, size, preprocessing.crop_offset)
  return np.array([left / new_w, top / new_h, (left + size) / new_w, (top + size) / new_h])


def visible_fraction(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
  """boxes [R, 4], window [4] (both xmin, ymin, xmax, ymax) -> [R]: the fraction of each box's extent inside the
  window, per axis multiplied (a box of zero width counts as inside where its position is)."""
  boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
  fraction = np.ones(len(boxes))
  for low, high in ((0, 2), (1, 3)):
    extent = boxes[:, high] - boxes[:, low]
    overlap = np.minimum(boxes[:, high], window[high]) - np.maximum(boxes[:, low], window[low])
    inside = (boxes[:, low] >= window[low]) & (boxes[:, high] <= window[high])
    fraction *= np.where(extent > 0, np.clip(overlap, 0.0, None) / np.where(extent > 0, extent, 1.0), inside)
  return fraction


def boxes_in_window(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
  """boxes [R, 4] as fractions of the image -> [R, 4] float32 as fractions of the window (the view), clipped to it."""
  origin = np.asarray([window[0], window[1], window[0], window[1]], np.float64)
  extent = np.asarray([window[2] - window[0], window[3] - window[1]] * 2, np.float64)
  return np.clip((np.asarray(boxes, np.float64) - origin) / extent, 0.0, 1.0).astype(np.float32)


def regions_in_view(regions: Regions | None, height: int, width: int, size: int,
                    preprocessing: ImagePreprocessing = OPENAI_CLIP_PREPROCESSING) -> Regions | None:
  """A record's regions (boxes as fractions of its [height, width] image) -> those of the
  `preprocessing.resize_image` view of `size` px, boxes as fractions of the view; regions with less than
  MIN_VISIBLE_FRACTION of their box in the view are dropped. Where the view keeps the whole image (a square image,
  or a square resize) the regions stay as they are (the same arrays)."""
  window = view_window(height, width, size, preprocessing)
  if regions is None or not len(regions.texts) or np.array_equal(window, [0.0, 0.0, 1.0, 1.0]):
    return regions
  kept = np.flatnonzero(visible_fraction(regions.boxes, window) >= MIN_VISIBLE_FRACTION)
  return Regions(boxes_in_window(regions.boxes[kept], window).reshape(len(kept), 4),
                 tuple(regions.texts[k] for k in kept))


def quantize_box(box: np.ndarray, bins: int) -> np.ndarray:
  """box: [..., 4] (xmin, ymin, xmax, ymax) as fractions of the image side -> [..., 4] int32 bin indices in
  [0, bins): bin k holds [k / bins, (k + 1) / bins); 1.0 falls in the last bin."""
  box = np.clip(np.asarray(box, np.float64), 0.0, 1.0)
  return np.minimum(np.floor(box * bins), bins - 1).astype(np.int32)


def dequantize_box(bins_index: np.ndarray, bins: int) -> np.ndarray:
  """[..., 4] bin indices -> [..., 4] float32 fractions of the image side: each bin's centre, so that
  |dequantize_box(quantize_box(b)) - b| <= 0.5 / bins."""
  return ((np.asarray(bins_index, np.float64) + 0.5) / bins).astype(np.float32)


def box_tokens(box: np.ndarray, layout: LoccaLayout) -> list[int]:
  """A box [4] (fractions) -> its four coordinate token ids."""
  return [layout.first_coordinate + int(k) for k in quantize_box(box, layout.box_bins)]


def tokens_to_box(ids: Sequence[int], layout: LoccaLayout) -> np.ndarray | None:
  """Four coordinate token ids (a decoded aref answer) -> the box [4] (fractions), or None when any of them is
  not a coordinate token."""
  bins = np.asarray(ids, np.int64) - layout.first_coordinate
  if bins.shape != (BOX_TOKENS,) or np.any((bins < 0) | (bins >= layout.box_bins)):
    return None
  return dequantize_box(bins, layout.box_bins)


def caption_sequence(caption_ids: Sequence[int], layout: LoccaLayout) -> tuple[list[int], int]:
  """[CAP] caption [EOS], the caption cut to fit `layout.length` predictions -> (ids, condition length 1)."""
  caption = list(caption_ids)[:layout.length - 1]
  return [layout.token('cap'), *caption, layout.eos_id], 1


def aref_sequence(text_ids: Sequence[int], box: np.ndarray, layout: LoccaLayout) -> tuple[list[int], int]:
  """[AREF] text [SEP] box [EOS] -> (ids, condition length: the ids up to and including [SEP]). The text is cut so
  that the box always fits."""
  text = list(text_ids)[:layout.length + 1 - REGION_TASK_OVERHEAD]
  ids = [layout.token('aref'), *text, layout.token('sep'), *box_tokens(box, layout), layout.eos_id]
  return ids, len(text) + 2


def gcap_sequence(box: np.ndarray, text_ids: Sequence[int], layout: LoccaLayout) -> tuple[list[int], int]:
  """[GCAP] box [SEP] text [EOS] -> (ids, condition length 1 + 4 + 1)."""
  text = list(text_ids)[:layout.length + 1 - REGION_TASK_OVERHEAD]
  return [layout.token('gcap'), *box_tokens(box, layout), layout.token('sep'), *text, layout.eos_id], BOX_TOKENS + 2


def teacher_forcing(ids: Sequence[int], condition: int, layout: LoccaLayout
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """A task sequence (at most length + 1 ids) -> (inputs [L] int32, targets [L] int32, loss_mask [L] float32).

  inputs[t] = ids[t], targets[t] = ids[t + 1], right-padded with pad_id. loss_mask[t] is 1 where targets[t] is a
  real id and, unless `layout.loss_on_condition`, ids[t + 1] lies after the condition (the first `condition` ids).
  """
  ids = np.asarray(ids, np.int32)
  count = len(ids) - 1  # predictions
  if not 0 < count <= layout.length:
    raise ValueError(f'a task sequence of {len(ids)} ids does not fit the decoder length {layout.length}')
  inputs = np.full(layout.length, layout.pad_id, np.int32)
  targets = np.full(layout.length, layout.pad_id, np.int32)
  inputs[:count], targets[:count] = ids[:-1], ids[1:]
  first = 0 if layout.loss_on_condition else condition - 1  # targets[t] is ids[t + 1]
  loss_mask = np.zeros(layout.length, np.float32)
  loss_mask[first:count] = 1.0
  return inputs, targets, loss_mask


def empty_row(layout: LoccaLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """A task row that trains nothing (a region task of an example without regions): pads and a zero loss mask."""
  pads = np.full(layout.length, layout.pad_id, np.int32)
  return pads, pads.copy(), np.zeros(layout.length, np.float32)


def example_arrays(caption: str, regions: Regions | None, rng: np.random.Generator, layout: LoccaLayout,
                   encode: Callable[[str], list[int]], tasks: Sequence[str] = TASKS, parallel_prob: float = 0.0
                   ) -> dict[str, np.ndarray]:
  """One example's decoder arrays, a row per task in `tasks` (T = len(tasks)):
    locca_inputs [T, L] int32, locca_targets [T, L] int32, locca_loss_mask [T, L] float32,
    locca_parallel [T] bool: the row is predicted in parallel (CapPa; only caption rows, each with `parallel_prob`).

  aref and gcap each read one region drawn uniformly from `regions` (independently); without regions their rows
  are empty (`empty_row`): such an example trains captioning only. `encode`: text -> token ids without start, end
  or padding (a tokenizer's `encode`), mapped to the decoder's text ids by `layout.text`. The draws: the parallel
  flag, then aref's region, then gcap's, each only where its task is present, so that an example gives the same
  arrays whatever else the batch holds.
  """
  unknown = [t for t in tasks if t not in TASKS]
  if unknown or not tasks:
    raise ConfigError(f'unknown or no LocCa tasks {list(tasks)}; valid choices: {list(TASKS)}')
  has_regions = regions is not None and len(regions.texts) > 0
  rows, parallel = [], []
  for task in tasks:
    if task == 'cap':
      parallel.append(bool(rng.random() < parallel_prob) if parallel_prob > 0 else False)
      rows.append(teacher_forcing(*caption_sequence(layout.text(encode(caption)), layout), layout))
      continue
    parallel.append(False)
    if not has_regions:
      rows.append(empty_row(layout))
      continue
    k = int(rng.integers(len(regions.texts)))
    box, text = regions.boxes[k], layout.text(encode(regions.texts[k]))
    sequence = aref_sequence(text, box, layout) if task == 'aref' else gcap_sequence(box, text, layout)
    rows.append(teacher_forcing(*sequence, layout))
  inputs, targets, loss_mask = (np.stack(column) for column in zip(*rows))
  return {'locca_inputs': inputs, 'locca_targets': targets, 'locca_loss_mask': loss_mask,
          'locca_parallel': np.asarray(parallel, bool)}
