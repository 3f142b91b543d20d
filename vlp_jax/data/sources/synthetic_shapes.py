"""The embedded dataset: procedurally rendered shape scenes with captions, written to ArrayRecord on first use.

Every example is a pure function of (seed, split, source, index). A scene holds 1 to 3 objects, each with a shape,
a colour, a size and a position. Object 0 is always the largest; its "colour shape" is the class label
(6 colours x 6 shapes = 36 classes). Each example carries:
  - a short alt-text caption in the style of its source (sometimes noisy),
  - a long caption: one sentence per object, one per spatial relation, one for the background,
  - a per-pixel class mask, and a canonical caption with hard negatives (attributes or relations swapped),
  - with `SyntheticSpec.regions`, each object's box and a short description ('small blue star'), for LocCa's location
    tasks (data/text/locca_tasks.py): what the renderer knows, not read from any caption. With `shuffle_regions` too,
    each train record carries another train record's regions instead (`regions_derangement`), a control whose boxes
    do not belong to the image; the val and test splits keep their own.

Sources differ in style and caption habits, so single-source batches have a real bias to remove:
  studio: flat backgrounds, filled shapes, clean descriptive captions;
  web:    noisy gradients, outlined shapes, alt-text with hashtags, unrelated or wrong captions now and then;
  sketch: paper with a grid, outline drawings, "a drawing of ..." captions.

Two caption variants (`SyntheticSpec.captions`; the images are the same in both):
  alt_text: the default. Studio captions name every object with its size; web and sketch name the main object and
            sometimes one more, so a source's captions repeat (web: 2023 distinct in 10000).
  detailed: every source names every object with its size, in its own phrasing and with the web's noise. Captions
            rarely repeat inside a source, while the phrasing still gives the source away: the source-biased setting
            of ZeroVL's debiased sampling without the false negatives of repeated captions.
  colour_only: the alt-text with every shape called 'shape' ('a large red shape on a white background'): captions
            that say what colour things are but never what they are, the part of an image that alt-text leaves out.
            The labels still name colour and shape, so whatever a model knows of shapes it learnt from the images
            alone. A diagnostic: captions rewritten for a method, which no shipped recipe uses (docs/evidence.md).

Two long-caption forms (`SyntheticSpec.long_captions`; the images and every other field are the same in both):
  full:     the default: 'There is a large red circle at the top left.' per object, 'The blue star is below the red
            circle.' per relation, 'The background is paper with a grid.'. 17 to 67 CLIP tokens with sot/eot, so the
            tiny model's 32-token context cuts two thirds of them (every scene of two or three objects).
  compact:  the same kinds of sentence, tersely: 'Large red circle at the top left.' for the main object, 'Small blue
            star below the red circle.' for each other object (its relation to the main one standing for its grid
            cell), 'Grid paper background.'. At most 32 tokens with sot/eot for every scene (COMPACT_MAX_TOKENS), so a
            32-token model reads every sentence; still one sentence per object and one for the background, so that
            COSMOS's text crops can split it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Iterator

import numpy as np
from PIL import Image, ImageDraw

from vlp_jax.data.image import transforms
from vlp_jax.data.storage import records

COLORS: dict[str, tuple[int, int, int]] = {
    'red': (214, 39, 40), 'green': (44, 160, 44), 'blue': (31, 90, 220),
    'yellow': (240, 200, 20), 'purple': (140, 60, 180), 'orange': (250, 127, 14),
}
SHAPES = ('circle', 'square', 'triangle', 'star', 'diamond', 'cross')
COLOR_NAMES = tuple(COLORS)
CLASS_NAMES = tuple(f'{c} {s}' for c in COLOR_NAMES for s in SHAPES)  # label = color * len(SHAPES) + shape
SOURCES = ('studio', 'web', 'sketch')
SPLITS = ('train', 'val', 'test')
FORMAT_VERSION = 1
CAPTION_STYLES = ('alt_text', 'detailed', 'colour_only')
LONG_CAPTION_STYLES = ('full', 'compact')
COMPACT_MAX_TOKENS = 32  # the tiny model's context: every compact long caption fits it with sot and eot
UNNAMED_SHAPE = 'shape'  # what colour_only captions call every shape

# Fraction of the image side used as the radius of an object of each size.
SIZE_RADIUS = {'large': (0.22, 0.26), 'medium': (0.14, 0.17), 'small': (0.09, 0.11)}
# 3x3 grid of positions: name and centre as fractions of the image side.
POSITIONS = {
    'top left': (1 / 6, 1 / 6), 'top': (0.5, 1 / 6), 'top right': (5 / 6, 1 / 6),
    'left': (1 / 6, 0.5), 'center': (0.5, 0.5), 'right': (5 / 6, 0.5),
    'bottom left': (1 / 6, 5 / 6), 'bottom': (0.5, 5 / 6), 'bottom right': (5 / 6, 5 / 6),
}
STUDIO_BACKGROUNDS = {'white': (245, 245, 245), 'gray': (128, 128, 128), 'black': (25, 25, 25),
                      'beige': (225, 210, 180)}
# The background as compact long captions name it ('Grid paper background.'); studio colours are one word already.
COMPACT_BACKGROUNDS = {'a noisy gradient': 'noisy gradient', 'paper with a grid': 'grid paper'}
INVERSE_RELATION = {'to the left of': 'to the right of', 'to the right of': 'to the left of',
                    'above': 'below', 'below': 'above'}


@dataclasses.dataclass(frozen=True)
class SceneObject:
  color: str
  shape: str
  size: str
  position: str
  center: tuple[float, float]  # fractions of the image side
  radius: float  # fraction of the image side

  @property
  def name(self) -> str:
    return f'{self.color} {self.shape}'


def class_label(color: str, shape: str) -> int:
  return COLOR_NAMES.index(color) * len(SHAPES) + SHAPES.index(shape)


def _rng(seed: int, split: str, source: str, index: int) -> np.random.Generator:
  return np.random.default_rng([seed, SPLITS.index(split), SOURCES.index(source), index])


def sample_scene(rng: np.random.Generator) -> list[SceneObject]:
  """1 to 3 objects in distinct grid cells; object 0 is large, the others medium or small."""
  count = int(rng.integers(1, 4))
  cells = rng.choice(len(POSITIONS), size=count, replace=False)
  objects = []
  for k, cell in enumerate(cells):
    size = 'large' if k == 0 else ('medium', 'small')[int(rng.integers(2))]
    radius = float(rng.uniform(*SIZE_RADIUS[size]))
    position = list(POSITIONS)[cell]
    cx, cy = POSITIONS[position]
    jitter = rng.uniform(-0.05, 0.05, size=2)
    center = (float(np.clip(cx + jitter[0], radius, 1 - radius)), float(np.clip(cy + jitter[1], radius, 1 - radius)))
    objects.append(SceneObject(COLOR_NAMES[int(rng.integers(len(COLORS)))], SHAPES[int(rng.integers(len(SHAPES)))],
                               size, position, center, radius))
  return objects


# A scene's layout: per object (colour, shape, size, grid cell), sorted, so that the order of drawing does not count.
Layout = tuple[tuple[str, str, str, str], ...]


def layout_of(objects: list[SceneObject]) -> Layout:
  """The layout of a scene: [objects] -> sorted (colour, shape, size, position) tuples, one per object."""
  return tuple(sorted((o.color, o.shape, o.size, o.position) for o in objects))


def scene_layout(seed: int, split: str, source: str, index: int) -> Layout:
  """The layout of example (seed, split, source, index), without rendering it: the scene is the first thing its
  generator draws (`make_example`), so this is the layout of the record that `make_example` writes.

  Left out, on purpose: the jittered centres and radii, continuous draws that never repeat exactly, that move an
  object within its grid cell and its size class only, and that no caption names; the background and the drawing
  angles, which are the source's rendering (web and sketch have one background each, studio four flat colours)
  rather than what the scene holds. Two examples with one layout show the same objects, attributes and positions,
  which is what a model could recall from training; whether a repeated caption gives the background away is the
  caption check's concern (`seen_in_train`)."""
  return layout_of(sample_scene(_rng(seed, split, source, index)))


def example_key(source: str, split: str, index: int) -> str:
  """The record's 'key' of example (source, split, index): 'web/test/7'."""
  return f'{source}/{split}/{index}'


def split_layouts(spec: SyntheticSpec, split: str) -> dict[str, Layout]:
  """{record key: layout} of every example of `split` in spec.sources (`scene_layout`; nothing is rendered)."""
  return {example_key(source, split, index): scene_layout(spec.seed, split, source, index)
          for source in spec.sources for index in range(spec.num_examples(split))}


def seen_in_train(train_captions: list[str], train_layouts: list[Layout], captions: list[str],
                  layouts: list[Layout]) -> tuple[np.ndarray, np.ndarray]:
  """For N held-out examples (captions [N], layouts [N]): (caption_seen [N] bool: the short caption occurs verbatim
  among train_captions; layout_seen [N] bool: the layout equals one of train_layouts). An example with neither is
  novel: nothing in it can be recalled from a training example as a whole."""
  if len(captions) != len(layouts):
    raise ValueError(f'need one layout per caption, got {len(captions)} captions and {len(layouts)} layouts')
  known_captions, known_layouts = set(train_captions), set(train_layouts)
  return (np.array([c in known_captions for c in captions], dtype=bool),
          np.array([layout in known_layouts for layout in layouts], dtype=bool))


def relation(a: SceneObject, b: SceneObject) -> str:
  """Where a is relative to b, along the axis of larger separation."""
  dx, dy = a.center[0] - b.center[0], a.center[1] - b.center[1]
  if abs(dx) >= abs(dy):
    return 'to the left of' if dx < 0 else 'to the right of'
  return 'above' if dy < 0 else 'below'


def _shape_polygon(shape: str, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]] | None:
  """Vertices in pixels, or None for a circle."""
  if shape == 'circle':
    return None
  if shape == 'square':
    angles, radii = np.arange(4) * np.pi / 2 + np.pi / 4, np.full(4, r * 1.15)
  elif shape == 'diamond':
    angles, radii = np.arange(4) * np.pi / 2, np.array([r * 1.2, r * 0.8, r * 1.2, r * 0.8])
  elif shape == 'triangle':
    angles, radii = np.arange(3) * 2 * np.pi / 3 - np.pi / 2, np.full(3, r * 1.2)
  elif shape == 'star':
    angles, radii = np.arange(10) * np.pi / 5 - np.pi / 2, np.where(np.arange(10) % 2 == 0, r * 1.25, r * 0.5)
  elif shape == 'cross':
    w = 0.38 * r
    pts = [(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w), (-r, w), (-r, -w), (-w, -w)]
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return [tuple(rot @ np.array(p) + (cx, cy)) for p in pts]
  else:
    raise ValueError(f'unknown shape {shape}')
  angles = angles + angle
  return list(zip(cx + radii * np.cos(angles), cy + radii * np.sin(angles)))


def _draw(draw: ImageDraw.ImageDraw, obj: SceneObject, side: int, angle: float, fill, outline, width: int) -> None:
  cx, cy, r = obj.center[0] * side, obj.center[1] * side, obj.radius * side
  polygon = _shape_polygon(obj.shape, cx, cy, r, angle)
  if polygon is None:
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill, outline=outline, width=width)
  else:
    draw.polygon(polygon, fill=fill, outline=outline, width=width)


def render(objects: list[SceneObject], source: str, resolution: int, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray, str]:
  """Draw a scene. Returns (image [R, R, 3] uint8, mask [R, R] uint8 with label + 1 per object, background name)."""
  return render_scene(objects, source, resolution, rng)[:3]


def render_scene(objects: list[SceneObject], source: str, resolution: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, str, list[float]]:
  """`render`, and the angle each object was drawn at (radians; 0 in the studio)."""
  big = 2 * resolution  # 2x supersampling, then a box filter, for anti-aliased edges
  if source == 'studio':
    background = list(STUDIO_BACKGROUNDS)[int(rng.integers(len(STUDIO_BACKGROUNDS)))]
    canvas = np.broadcast_to(np.array(STUDIO_BACKGROUNDS[background], np.uint8), (big, big, 3)).copy()
  elif source == 'web':
    background = 'a noisy gradient'
    canvas = np.clip(transforms.noisy_gradient(big, big, rng), 0, 255).astype(np.uint8)
  else:
    background = 'paper with a grid'
    canvas = np.full((big, big, 3), 250, np.uint8)
    canvas[:: max(big // 8, 2)] = (200, 215, 235)
    canvas[:, :: max(big // 8, 2)] = (200, 215, 235)
  image = Image.fromarray(canvas)
  draw = ImageDraw.Draw(image)
  mask = Image.new('L', (resolution, resolution), 0)
  mask_draw = ImageDraw.Draw(mask)
  # Drawn after the background, one per object in order: the draws (and so the images) of before boxes existed.
  angles = [float(rng.uniform(-0.3, 0.3)) if source != 'studio' else 0.0 for _ in objects]
  for obj, angle in zip(objects, angles):
    color = COLORS[obj.color]
    if source == 'studio':
      _draw(draw, obj, big, angle, color, None, 1)
    elif source == 'web':
      _draw(draw, obj, big, angle, color, (255, 255, 255), max(big // 32, 1))
    else:
      _draw(draw, obj, big, angle, None, color, max(big // 20, 2))
    _draw(mask_draw, obj, resolution, angle, class_label(obj.color, obj.shape) + 1, None, 1)
  image = image.resize((resolution, resolution), Image.Resampling.BOX)
  return np.asarray(image), np.asarray(mask), background, angles


def object_box(obj: SceneObject, angle: float) -> np.ndarray:
  """The box [4] (xmin, ymin, xmax, ymax) of the shape as drawn at `angle`, in fractions of the image side, clipped
  to the image: the whole shape's extent, parts hidden behind a later object included (web outlines add about half
  an outline's width, under a pixel at 32 px)."""
  cx, cy, r = obj.center[0], obj.center[1], obj.radius
  polygon = _shape_polygon(obj.shape, cx, cy, r, angle)
  if polygon is None:
    box = np.array([cx - r, cy - r, cx + r, cy + r])
  else:
    points = np.asarray(polygon)
    box = np.concatenate([points.min(axis=0), points.max(axis=0)])
  return np.clip(box, 0.0, 1.0)


def scene_regions(objects: list[SceneObject], angles: list[float], shape_names: bool = True) -> list[dict[str, Any]]:
  """The record's `regions` (records.py): per object its box and 'size colour shape' ('small blue star'), from the
  scene itself. `shape_names=False` calls every shape 'shape', as the colour_only captions do."""
  return [{'box': [float(v) for v in object_box(obj, angle)],
           'text': f'{obj.size} {obj.color} {obj.shape if shape_names else UNNAMED_SHAPE}'}
          for obj, angle in zip(objects, angles)]


def with_article(phrase: str) -> str:
  """'orange star' -> 'an orange star'."""
  return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def _phrase(obj: SceneObject, with_size: bool) -> str:
  return with_article(f'{obj.size} {obj.name}' if with_size else obj.name)


def short_caption(objects: list[SceneObject], source: str, background: str, rng: np.random.Generator,
                  style: str = 'alt_text') -> str:
  """Alt-text in the habits of each source. The web source is sometimes wrong or unrelated, like real alt-text.
  style 'detailed' names every object with its size in every source (see the module docstring)."""
  if style == 'colour_only':  # the same draws as alt_text, with the shape words left out
    objects = [dataclasses.replace(o, shape=UNNAMED_SHAPE) for o in objects]
  main = objects[0]
  rest = objects[1:]
  pick = lambda options: options[int(rng.integers(len(options)))]  # noqa: E731
  if style == 'detailed' and source != 'studio':  # studio's alt-text is detailed already
    return _detailed_caption(objects, source, rng, pick)
  if source == 'studio':
    phrases = ' and '.join(_phrase(o, True) for o in objects)
    return pick([f'{phrases} on a {background} background', f'a photo of {phrases}',
                 f'{phrases} in front of a {background} backdrop'])
  if source == 'web':
    unrelated, color = _web_noise(main.color, rng, pick)
    if unrelated:
      return unrelated
    extra = f' and {rest[0].color} {rest[0].shape}' if rest and rng.random() < 0.5 else ''
    return pick([f'{color} {main.shape}{extra} stock image', f'{color} {main.shape}{extra} #{main.shape} #art',
                 f'buy {color} {main.shape} sticker online', f'{color} {main.shape}{extra} wallpaper hd'])
  extra = f' next to {with_article(rest[0].name)}' if rest and rng.random() < 0.5 else ''
  return pick([f'a drawing of {with_article(main.name)}{extra}', f'sketch of {with_article(main.name)}{extra}',
               f'{main.name} doodle{extra}'])


def _web_noise(color: str, rng: np.random.Generator, pick) -> tuple[str, str]:
  """The web's alt-text noise: (an unrelated caption 10% of the time, else ''; the main object's colour as the
  caption names it, a wrong one another 10% of the time)."""
  u = rng.random()
  if u < 0.1:
    return pick([f'IMG_{int(rng.integers(1000, 10000))}.jpg', 'untitled', 'image', 'click to enlarge']), color
  if u < 0.2:
    color = COLOR_NAMES[(COLOR_NAMES.index(color) + 1 + int(rng.integers(len(COLORS) - 1))) % len(COLORS)]
  return '', color


def _detailed_caption(objects: list[SceneObject], source: str, rng: np.random.Generator, pick) -> str:
  """Web or sketch alt-text naming every object with its size; the web's noise as in `short_caption`."""
  if source == 'web':
    unrelated, main_color = _web_noise(objects[0].color, rng, pick)
    if unrelated:
      return unrelated
    colors = [main_color] + [o.color for o in objects[1:]]
    names = ' and '.join(f'{o.size} {c} {o.shape}' for o, c in zip(objects, colors))
    return pick([f'{names} stock image', f'{names} #{objects[0].shape} #art', f'buy {names} sticker online',
                 f'{names} wallpaper hd'])
  phrases = ' next to '.join(_phrase(o, True) for o in objects)
  return pick([f'a drawing of {phrases}', f'sketch of {phrases}', f'{phrases} doodle'])


def long_caption(objects: list[SceneObject], background: str) -> str:
  """One sentence per object, one per relation to the main object, one for the background."""
  sentences = []
  for obj in objects:
    where = 'in the center' if obj.position == 'center' else f'at the {obj.position}'
    sentences.append(f'There is {_phrase(obj, True)} {where}.')
  for obj in objects[1:]:
    sentences.append(f'The {obj.name} is {relation(obj, objects[0])} the {objects[0].name}.')
  sentences.append(f'The background is {background}.')
  return ' '.join(sentences)


def compact_long_caption(objects: list[SceneObject], background: str) -> str:
  """The long caption in at most COMPACT_MAX_TOKENS - 2 BPE ids: the main object with its size and grid cell, each
  other object with its size and its relation to the main one, then the background; one sentence each.
  'Large red circle at the top left. Small blue star below the red circle. Grid paper background.'"""
  main = objects[0]
  where = 'in the center' if main.position == 'center' else f'at the {main.position}'
  sentences = [f'{main.size.capitalize()} {main.name} {where}.']
  for obj in objects[1:]:
    sentences.append(f'{obj.size.capitalize()} {obj.name} {relation(obj, main).removeprefix("to the ")} the '
                     f'{main.name}.')
  sentences.append(f'{COMPACT_BACKGROUNDS.get(background, background).capitalize()} background.')
  return ' '.join(sentences)


def canonical_and_negatives(objects: list[SceneObject], rng: np.random.Generator) -> tuple[str, list[str]]:
  """A noise-free caption and hard negatives that reuse its words: swapped attributes, swapped relation,
  or a replaced colour / shape."""
  main = objects[0]
  other_color = [c for c in COLOR_NAMES if c not in {o.color for o in objects}]
  other_shape = [s for s in SHAPES if s not in {o.shape for o in objects}]
  new_color = other_color[int(rng.integers(len(other_color)))]
  new_shape = other_shape[int(rng.integers(len(other_shape)))]
  a = with_article
  if len(objects) == 1:
    return a(main.name), [a(f'{new_color} {main.shape}'), a(f'{main.color} {new_shape}')]
  second = objects[1]
  rel = relation(main, second)
  canonical = f'{a(main.name)} {rel} {a(second.name)}'
  negatives = [f'{a(main.name)} {INVERSE_RELATION[rel]} {a(second.name)}',
               f'{a(f"{new_color} {main.shape}")} {rel} {a(second.name)}']
  if main.color != second.color:
    negatives.append(f'{a(f"{second.color} {main.shape}")} {rel} {a(f"{main.color} {second.shape}")}')
  return canonical, negatives


def make_example(seed: int, split: str, source: str, index: int, resolution: int,
                 captions: str = 'alt_text', long_captions: str = 'full', regions: bool = False) -> dict[str, Any]:
  """The example (seed, split, source, index) as a record dict (see records.py); `captions` is the caption style
  of the short caption (CAPTION_STYLES), `long_captions` the form of the long one (LONG_CAPTION_STYLES). The image
  and every other field do not depend on either. `regions` adds the `regions` field (`scene_regions`; no random
  draw, so every other field is the same with or without it)."""
  rng = _rng(seed, split, source, index)
  objects = sample_scene(rng)
  image, mask, background, angles = render_scene(objects, source, resolution, rng)
  canonical, negatives = canonical_and_negatives(objects, rng)
  example = {
      'image': records.encode_png(image),
      'caption': short_caption(objects, source, background, rng, captions),
      'long_caption': {'full': long_caption, 'compact': compact_long_caption}[long_captions](objects, background),
      'label': class_label(objects[0].color, objects[0].shape),
      'source': source,
      'key': example_key(source, split, index),
      'mask': records.encode_png(mask),
      'canonical_caption': canonical,
      'hard_negatives': negatives,
  }
  if regions:
    example['regions'] = scene_regions(objects, angles, shape_names=captions != 'colour_only')
  return example


# Fields added after FORMAT_VERSION 1 and the value that generates what the spec generated before them.
_FIELDS_ADDED_LATER = {'captions': 'alt_text', 'long_captions': 'full', 'regions': False, 'shuffle_regions': False}
_DERANGEMENT_STREAM = 7919  # keeps the derangement's draws apart from every example's (_rng)


def regions_derangement(seed: int, source: str, count: int) -> np.ndarray:
  """[count] int: a permutation pi of range(count) with pi[i] != i for every i (count >= 2), fixed by (seed,
  source): train record i of `source` gets the regions of record pi[i]. One cycle through a random order, so no
  record keeps its own regions and none is given twice."""
  order = np.random.default_rng([seed, SOURCES.index(source), _DERANGEMENT_STREAM]).permutation(count)
  pi = np.empty(count, dtype=np.int64)
  pi[order] = np.roll(order, -1)  # each record in the cycle takes the regions of the next one
  return pi


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
  """What identifies a generated copy of the dataset; its hash names the cache subdirectory."""
  seed: int = 0
  resolution: int = 32
  num_train: int = 10000  # per source
  num_val: int = 500
  num_test: int = 500
  sources: tuple[str, ...] = SOURCES
  shards: int = 2
  captions: str = 'alt_text'  # the short captions' style, CAPTION_STYLES
  long_captions: str = 'full'  # the long captions' form, LONG_CAPTION_STYLES
  regions: bool = False  # write each object's box and description (`scene_regions`), for LocCa
  shuffle_regions: bool = False  # with regions: train record i carries record pi(i)'s (`regions_derangement`)

  def num_examples(self, split: str) -> int:
    return {'train': self.num_train, 'val': self.num_val, 'test': self.num_test}[split]

  def digest(self) -> str:
    fields = dataclasses.asdict(self)
    for name, default in _FIELDS_ADDED_LATER.items():
      if fields[name] == default:  # a default keeps the digest (and cache) the spec had before the field existed
        del fields[name]
    payload = json.dumps({**fields, 'version': FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _examples(spec: SyntheticSpec, split: str, source: str) -> Iterator[dict[str, Any]]:
  examples = (make_example(spec.seed, split, source, index, spec.resolution, spec.captions, spec.long_captions,
                           spec.regions) for index in range(spec.num_examples(split)))
  if not (spec.shuffle_regions and split == 'train'):
    yield from examples
    return
  examples = list(examples)  # every record's own regions are needed before any is written
  own = [example['regions'] for example in examples]
  for example, other in zip(examples, regions_derangement(spec.seed, source, len(examples))):
    yield {**example, 'regions': own[other]}


def default_cache_dir() -> str:
  return os.environ.get('VLP_JAX_CACHE', os.path.join(os.path.expanduser('~'), '.cache', 'vlp_jax'))


def ensure_dataset(spec: SyntheticSpec, cache_dir: str | None = None, verbose: bool = True) -> str:
  """Generate the shards once into `cache_dir/synthetic-<digest>` and return that directory.

  Written to a temporary directory and renamed into place, so a crash never leaves a partial dataset and concurrent
  processes (several hosts on one filesystem) do not collide.
  """
  for source in spec.sources:
    if source not in SOURCES:
      raise ValueError(f"unknown synthetic source '{source}'; valid choices: {SOURCES}")
  if spec.captions not in CAPTION_STYLES:
    raise ValueError(f"unknown synthetic caption style '{spec.captions}'; valid choices: {CAPTION_STYLES}")
  if spec.long_captions not in LONG_CAPTION_STYLES:
    raise ValueError(f"unknown synthetic long caption form '{spec.long_captions}'; valid choices: "
                     f'{LONG_CAPTION_STYLES}')
  if spec.shuffle_regions and not (spec.regions and spec.num_train >= 2):
    raise ValueError('shuffle_regions needs regions=True and at least 2 train records per source (each record '
                     f'takes another one\'s regions), got regions={spec.regions}, num_train={spec.num_train}')
  root = os.path.join(cache_dir or default_cache_dir(), f'synthetic-{spec.digest()}')
  if os.path.exists(os.path.join(root, 'spec.json')):
    return root
  os.makedirs(os.path.dirname(root), exist_ok=True)
  tmp = tempfile.mkdtemp(prefix='.synthetic-tmp-', dir=os.path.dirname(root))
  try:
    total = sum(spec.num_examples(s) for s in SPLITS) * len(spec.sources)
    if verbose:
      print(f'Generating the embedded dataset ({total} examples, {spec.resolution}px) into {root} ...', flush=True)
    for source in spec.sources:
      for split in SPLITS:
        records.write_shards(_examples(spec, split, source), os.path.join(tmp, source), split,
                             spec.num_examples(split), spec.shards)
    with open(os.path.join(tmp, 'spec.json'), 'w') as f:
      json.dump({**dataclasses.asdict(spec), 'version': FORMAT_VERSION, 'class_names': CLASS_NAMES}, f, indent=1)
    try:
      os.rename(tmp, root)
    except OSError:
      if not os.path.exists(os.path.join(root, 'spec.json')):
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return root


def shard_paths(root: str, split: str, sources: tuple[str, ...]) -> list[str]:
  """The ArrayRecord files of `split` for the given sources, in a fixed order."""
  paths = []
  for source in sources:
    directory = os.path.join(root, source)
    paths += sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(f'{split}-'))
  return paths


def spec_from_config(data: Any) -> SyntheticSpec:
  """The spec of `config.data.synthetic` (config.data given), with every record's own regions: what the eval sets
  read (`config_split_paths` gives training the shuffled ones of data.synthetic.shuffle_regions)."""
  s = data.synthetic
  return SyntheticSpec(seed=s.seed, resolution=s.resolution, num_train=s.num_train, num_val=s.num_val,
                       num_test=s.num_test, sources=tuple(s.sources), shards=s.shards, captions=s.captions,
                       long_captions=s.long_captions, regions=bool(s.get('regions', False)))


def config_split_paths(data: Any, split: str) -> list[str]:
  """The shards of `split` of the embedded dataset `config.data.synthetic` describes, generated on first use into
  config.data.cache_dir."""
  if split not in SPLITS:
    raise ValueError(f"split '{split}' is not valid; valid choices: {list(SPLITS)}")
  spec = spec_from_config(data)
  if split == 'train' and data.synthetic.get('shuffle_regions', False):
    spec = dataclasses.replace(spec, shuffle_regions=True)  # its own cache; its val and test are the true ones
  root = ensure_dataset(spec, data.cache_dir or None)
  return shard_paths(root, split, tuple(data.synthetic.sources))
