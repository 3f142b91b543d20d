"""Evaluation plots as PNG files: a t-SNE of the image embeddings coloured by class (SaCo supplementary Fig. 1), the
histogram of per-query affinity consistency, image -> caption retrieval examples, and COSMOS's cross-attention maps.

Every `plot_*` function takes host arrays, writes one PNG and returns its path; where a test looks at what is drawn,
a pure `*_figure` function builds the matplotlib Figure (no pyplot state) and `save_figure` writes it.
`write_eval_plots` and `write_cross_attention_plot` choose what applies to an eval set and name the files
`<dataset>_<plot>.png`. A metric has one colour in every plot (`metric_colour`), the training curves' included.
"""
from __future__ import annotations

import functools
import io
import math
import os
import textwrap
import zlib
from typing import Sequence

import matplotlib
import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from vlp_jax import paths
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.image.image_ops import denormalize_image
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.data.text.tokenizer_factory import tokenizer_for
from vlp_jax.evaluation.affinity import first_captions, per_query_affinity_consistency

MAX_LEGEND = 36  # classes named in the t-SNE legend (all of the embedded dataset's); the rest are drawn but not named
UNLABELLED = (0.6, 0.6, 0.6, 1.0)
EXACT_TSNE_POINTS = 500  # up to this many points t-SNE runs with exact gradients, beyond with Barnes-Hut
DPI = 100

# One colour per metric in every plot (curves.png's panels, the affinity histogram), so that a colour reads the same
# everywhere; metrics not listed get a colour from their name's checksum (stable across runs and processes).
METRIC_COLOURS = {
    'train/loss': 'black', 'zeroshot_top1': 'tab:blue', 'i2t_r1': 'tab:orange', 't2i_r1': 'tab:green',
    'affinity_consistency': 'tab:red', 'linear_probe_top1': 'tab:purple', 'compositional_acc': 'tab:brown',
    'segmentation_miou': 'tab:pink', 'winoground_group': 'tab:olive',
}
# The embedded dataset's shapes as the scatter markers closest to how they are rendered
# (data/sources/synthetic_shapes.py).
SHAPE_MARKERS = {'circle': 'o', 'square': 's', 'triangle': '^', 'star': '*', 'diamond': 'D', 'cross': 'P'}
MARKER_AREA = {'*': 2.0}  # times the scatter's point area: a star's thin arms look smaller than a disc of its size
POINT_AREA = 14.0  # points^2


def save_figure(fig: Figure, path: str) -> str:
  """Writes `fig` as a PNG at `path` (its folder made), the legend outside the axes included; returns the path.
  `path` may be on an object store (`gs://`): the PNG is rendered in memory and uploaded."""
  if paths.is_remote(path):
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png', dpi=DPI, bbox_inches='tight')
    paths.write_bytes(path, buffer.getvalue())
    return path
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=DPI, bbox_inches='tight')
  return path


def metric_colour(name: str) -> tuple[float, float, float, float]:
  """RGBA of a metric, the same in every panel and plot: 'zeroshot_top1' or 'eval/<dataset>/zeroshot_top1'."""
  metric = name.split('/', 2)[2] if name.startswith('eval/') else name
  if metric in METRIC_COLOURS:
    return to_rgba(METRIC_COLOURS[metric])
  return tuple(matplotlib.colormaps['tab20'](zlib.crc32(metric.encode()) % 20))


# ------------------------------------------------------------------------------------------------------------ t-SNE


def subsample_indices(n: int, max_points: int, seed: int = 0) -> np.ndarray:
  """[M] sorted row indices, M = min(n, max_points): all rows, or a random subset that depends only on the seed."""
  if n <= max_points:
    return np.arange(n)
  return np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))


def tsne_points(image_emb: np.ndarray, max_points: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """[N, d] -> (indices [M] of the rows kept, points [M, 2]); deterministic for a seed."""
  from sklearn.manifold import TSNE
  keep = subsample_indices(len(image_emb), max_points, seed)
  x = np.asarray(image_emb, np.float32)[keep]
  if len(x) < 3:  # t-SNE needs perplexity < M and a PCA init of 2 components: too few points to embed
    return keep, np.zeros((len(x), 2), np.float32)
  # sklearn's default perplexity (30) must stay below the number of points; ~M / 3 keeps small sets meaningful.
  perplexity = float(min(30.0, max(1.0, (len(x) - 1) / 3)))
  # Exact gradients are faster than Barnes-Hut below a few hundred points (3x at 500 on 2 cores).
  tsne = TSNE(n_components=2, perplexity=perplexity, init='pca', learning_rate='auto', random_state=seed,
              method='exact' if len(x) <= EXACT_TSNE_POINTS else 'barnes_hut')
  return keep, tsne.fit_transform(x).astype(np.float32)


def class_colours(num_classes: int) -> np.ndarray:
  """[K, 4] RGBA: tab10 / tab20 when they have enough colours, else evenly spaced hues of 'turbo'."""
  for name, size in (('tab10', 10), ('tab20', 20)):
    if num_classes <= size:
      return matplotlib.colormaps[name](np.arange(num_classes))
  return matplotlib.colormaps['turbo'](np.linspace(0.0, 1.0, num_classes))


def named_style(class_name: str) -> tuple[tuple[float, float, float, float], str] | None:
  """'red triangle' -> (RGBA of the embedded dataset's red, the triangle marker '^'): what a class name of the
  embedded shapes dataset says it looks like; None for a name that is not '<colour> <shape>' in its vocabulary."""
  words = class_name.split()
  if len(words) != 2 or words[0] not in synthetic.COLORS or words[1] not in SHAPE_MARKERS:
    return None
  return tuple(c / 255 for c in synthetic.COLORS[words[0]]) + (1.0,), SHAPE_MARKERS[words[1]]


def class_styles(class_names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
  """(colours [K, 4] RGBA, markers [K]) to draw each class with: the colour and shape its name says when every name
  says one (the embedded dataset), else a palette colour (`class_colours`) and circles. All or none: palette colours
  beside named ones could repeat a named colour under another name."""
  styles = [named_style(str(name)) for name in class_names]
  if styles and all(styles):
    return np.array([colour for colour, _ in styles]), [marker for _, marker in styles]
  return class_colours(len(class_names)), ['o'] * len(class_names)


def tsne_figure(points: np.ndarray, labels: np.ndarray, class_names: Sequence[str], title: str) -> Figure:
  """points [M, 2], labels [M] (-1 or >= K: unlabelled) -> a scatter, one artist per class labelled with its name,
  drawn as `class_styles` says; the legend shows the `MAX_LEGEND` most frequent classes with those very artists as
  handles, so that its colours and markers are the scatter's."""
  labels = np.asarray(labels)
  colours, markers = class_styles(class_names)
  fig = Figure(figsize=(10, 7))
  ax = fig.add_subplot()
  unlabelled = (labels < 0) | (labels >= len(class_names))
  present, counts = np.unique(labels[~unlabelled], return_counts=True)
  scatter = functools.partial(ax.scatter, linewidths=0, alpha=0.85)
  handles = {}
  if unlabelled.any():  # first, under the classes
    handles[-1] = scatter(points[unlabelled, 0], points[unlabelled, 1], color=UNLABELLED, marker='o',
                          s=POINT_AREA, label='unlabelled')
  for c in present:
    rows = labels == c
    handles[c] = scatter(points[rows, 0], points[rows, 1], color=colours[c], marker=markers[c],
                         s=POINT_AREA * MARKER_AREA.get(markers[c], 1.0), label=str(class_names[c]))
  named = np.sort(present[np.argsort(-counts, kind='stable')][:MAX_LEGEND])  # the most frequent, in class order
  shown = [handles[c] for c in named] + ([handles[-1]] if -1 in handles else [])
  if shown:
    ax.legend(handles=shown, loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
              ncols=2 if len(shown) > 18 else 1, markerscale=1.5, title_fontsize=8,
              title=f'{len(named)} of {len(present)} classes' if len(named) < len(present) else None)
  ax.set(xticks=[], yticks=[], title=title)
  return fig


def plot_tsne(image_emb: np.ndarray, labels: np.ndarray, class_names: Sequence[str], path: str,
              max_points: int = 2000, seed: int = 0, title: str = '') -> str:
  """image_emb [N, d], labels [N] (-1: unlabelled) -> `path`: the t-SNE of at most `max_points` images drawn by
  `tsne_figure`."""
  keep, points = tsne_points(image_emb, max_points, seed)
  title = f'{title or "t-SNE of image embeddings"} ({len(keep)} of {len(image_emb)} images)'
  return save_figure(tsne_figure(points, np.asarray(labels)[keep], class_names, title), path)


# ------------------------------------------------------------------------------------------------ affinity histogram


def affinity_histogram_figure(per_query: np.ndarray, label: str | None = None) -> Figure:
  """per_query [N] affinity consistency (Pearson, in [-1, 1]) -> its histogram on fixed bins over [-1, 1], so that
  checkpoints compare at a glance, in the metric's colour, with the mean (the reported metric) marked."""
  per_query = np.asarray(per_query, np.float64)
  mean = float(np.mean(per_query)) if per_query.size else float('nan')
  fig = Figure(figsize=(6, 3.8))
  ax = fig.add_subplot()
  ax.hist(per_query, bins=np.linspace(-1.0, 1.0, 41), color=metric_colour('affinity_consistency'), alpha=0.8,
          label=label)
  ax.axvline(mean, color='black', linestyle='--', linewidth=1.5, label=f'mean {mean:.3f}')
  ax.set(xlim=(-1, 1), xlabel='Pearson(image affinities, caption affinities) per query', ylabel='queries',
         title='affinity consistency' + (f': {label}' if label else '') + f' (N = {per_query.size})')
  ax.legend(fontsize=8)
  return fig


def plot_affinity_histogram(per_query: np.ndarray, path: str, label: str | None = None) -> str:
  """per_query [N] -> `path`: `affinity_histogram_figure`."""
  return save_figure(affinity_histogram_figure(per_query, label), path)


# ------------------------------------------------------------------------------------------------ retrieval examples


def query_indices(num_images: int, num_queries: int) -> np.ndarray:
  """[Q] image indices spread evenly over the set (deterministic), Q = min(num_images, num_queries)."""
  return np.unique(np.linspace(0, num_images - 1, min(num_images, num_queries)).round().astype(int))


def _rows_figure(num_rows: int, row_height: float, width_ratios: tuple[float, float]):
  """A figure of `num_rows` (image, text) axes pairs, room left on top for the title above the first row's titles."""
  fig = Figure(figsize=(10, row_height * num_rows))
  axes = fig.subplots(num_rows, 2, squeeze=False, gridspec_kw={'width_ratios': width_ratios})
  fig.subplots_adjust(top=1.0 - 0.75 / fig.get_figheight(), wspace=0.05)
  return fig, axes


def _show_image(ax, image: np.ndarray) -> None:
  ax.imshow(denormalize_image(image), interpolation='nearest')
  ax.set(xticks=[], yticks=[])


def plot_retrieval_examples(images: np.ndarray, captions: Sequence[str], caption_image: np.ndarray,
                            image_emb: np.ndarray, text_emb: np.ndarray, path: str, num_queries: int = 4,
                            k: int = 3, title: str = '') -> str:
  """images [N, S, S, 3] normalised, captions [T] with caption_image [T], image_emb [N, d], text_emb [T, d] unit-norm
  -> for a few image queries, the image and its top-k captions by cosine: green where the caption is the image's."""
  caption_image = np.asarray(caption_image)
  queries = query_indices(len(images), num_queries)
  k = min(k, len(captions))
  fig, axes = _rows_figure(len(queries), 2.2, (1, 4))
  for row, (image_ax, text_ax) in zip(queries, axes):
    _show_image(image_ax, images[row])
    image_ax.set_title(f'image {row}', fontsize=9)
    scores = np.asarray(text_emb) @ np.asarray(image_emb)[row]  # [T]
    top = np.argsort(-scores, kind='stable')[:k]
    text_ax.axis('off')
    lines = [(f'{rank + 1}. ({scores[j]:.2f}) {textwrap.shorten(captions[j], 90)}',
              'tab:green' if caption_image[j] == row else 'tab:red') for rank, j in enumerate(top)]
    own = np.flatnonzero(caption_image == row)
    if len(own) and not np.isin(own, top).any():
      lines.append((f'truth: {textwrap.shorten(captions[own[0]], 90)}', 'dimgray'))
    for i, (line, colour) in enumerate(lines):
      text_ax.text(0.02, 1.0 - (i + 0.5) / (k + 1), line, color=colour, fontsize=9, va='center',
                   transform=text_ax.transAxes)
  fig.suptitle(f'{title or "image -> caption retrieval"}: top {k} (green: a caption of the image)', fontsize=10)
  return save_figure(fig, path)


# --------------------------------------------------------------------------------------- COSMOS cross-attention maps


def cosmos_objective(objective):
  """The COSMOS objective inside `objective` (a Composite wraps it with its terms), or None.

  Found by what the maps need, COSMOS's `cross_attend` (objectives/cosmos.py), not by class: evaluation imports no
  objective.
  """
  base = getattr(objective, 'base', objective)
  return base if callable(getattr(base, 'cross_attend', None)) else None


def _cross_attention(cosmos, params, model_state, images, tokens) -> dict:
  """COSMOS's two cross-attention modules as `features` applies them, on one image and one caption per example:
  h_img = CrossAttn_image(q=CLS, kv=text tokens up to the EOT), h_txt = CrossAttn_text(q=EOT, kv=patch tokens)."""
  import jax.numpy as jnp
  image_out, _ = cosmos.encode_image(params, model_state, images, False, with_tokens=True)
  text_out = cosmos.encode_text(params, tokens, with_tokens=True)
  (h_img, text_weights), (h_txt, image_weights) = cosmos.cross_attend(
      params, image_out['embed'][:, None], text_out['embed'][:, None], text_out['tokens'], tokens,
      image_out['tokens'], return_weights=True)
  # [B, heads, 1 query, T] -> [B, T]: the mean over heads still sums to 1.
  return {'h_img': h_img[:, 0], 'h_txt': h_txt[:, 0], 'image_attention': jnp.mean(image_weights, axis=1)[:, 0],
          'text_attention': jnp.mean(text_weights, axis=1)[:, 0]}


def cross_attention_outputs(objective, params: dict, model_state: dict, images: np.ndarray, tokens: np.ndarray
                            ) -> dict[str, np.ndarray]:
  """images [N, S, S, 3] normalised, tokens [N, L] (caption i describes image i) -> {'h_img', 'h_txt': [N, d] (not
  normalised), 'image_attention': [N, P], 'text_attention': [N, L]}, numpy; the student's `params`."""
  import jax
  cosmos = cosmos_objective(objective)
  if cosmos is None:
    raise ValueError(f"objective '{objective.name}' has no cross-attention modules (only COSMOS has)")
  out = _jitted_cross_attention(cosmos)(params, model_state, np.asarray(images, np.float32),
                                       np.asarray(tokens, np.int32))
  return jax.tree.map(lambda x: np.asarray(jax.device_get(x), np.float32), out)


@functools.lru_cache(maxsize=4)
def _jitted_cross_attention(cosmos):
  """One compiled `_cross_attention` per objective (a fresh partial per call would compile again)."""
  import jax
  return jax.jit(functools.partial(_cross_attention, cosmos))


def cross_attention_maps(objective, params: dict, model_state: dict, images: np.ndarray, tokens: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
  """COSMOS's attention weights, mean over heads, each row summing to 1: (image_attention [N, P]: the text-conditioned
  module (query: caption i's EOT embedding) over image i's patch tokens, row-major; text_attention [N, L]: the
  image-conditioned module (query: image i's CLS embedding) over caption i's tokens, 0 after the EOT)."""
  out = cross_attention_outputs(objective, params, model_state, images, tokens)
  return out['image_attention'], out['text_attention']


def token_strings(tokens: np.ndarray, tokenizer=None) -> list[str]:
  """[L] ids of one caption tokenised by CLIP's BPE tokenizer (the default) or `tokenizer` (with the same
  sot_token / eot_token / decode) -> the text of each token up to and including the EOT ('<sot>', ..., '<eot>')."""
  tokenizer = tokenizer or default_tokenizer()
  special = {tokenizer.sot_token: '<sot>', tokenizer.eot_token: '<eot>'}
  # The first EOT (CLIP's is also the largest id, its argmax, which rows without an EOT fall back to).
  eot = np.flatnonzero(np.asarray(tokens) == tokenizer.eot_token)
  ids = np.asarray(tokens).tolist()[:int(eot[0] if eot.size else np.argmax(tokens)) + 1]
  # decode drops trailing id 0 as padding though 0 is also the symbol '!'; an EOT after it (dropped too) keeps it.
  return [special.get(i) or tokenizer.decode([i, tokenizer.eot_token]) for i in ids]


def _patch_grid(num_patches: int, grid: tuple[int, int] | None) -> tuple[int, int]:
  if grid is None:
    side = math.isqrt(num_patches)
    if side * side != num_patches:
      raise ValueError(f'{num_patches} patches are not a square grid: pass grid=(rows, cols)')
    grid = (side, side)
  if grid[0] * grid[1] != num_patches:
    raise ValueError(f'grid {grid} does not hold {num_patches} patches')
  return tuple(grid)


def _shaded_tokens(ax, tokens: Sequence[str], weights: np.ndarray, fontsize: float = 8.0) -> None:
  """Writes the tokens left to right in a monospace font (so widths follow from lengths), wrapping lines, each on
  a background shaded by its weight relative to the largest."""
  fig = ax.figure
  bbox = ax.get_position()
  width_pt, height_pt = bbox.width * fig.get_figwidth() * 72, bbox.height * fig.get_figheight() * 72
  char_w, line_h = 0.6 * fontsize / width_pt, 2.0 * fontsize / height_pt  # in axes fractions
  cmap = matplotlib.colormaps['Reds']
  top = max(float(np.max(weights)), 1e-12) if len(weights) else 1.0
  x, y = 0.0, 1.0 - line_h / 2
  for token, weight in zip(tokens, weights):
    width = (len(token) + 1) * char_w
    if x > 0 and x + width > 1.0:
      x, y = 0.0, y - line_h
    ax.text(x, y, token, family='monospace', fontsize=fontsize, va='center', transform=ax.transAxes,
            bbox={'facecolor': cmap(0.85 * float(weight) / top), 'edgecolor': 'none', 'pad': 1.5})
    x += width


def plot_cross_attention(images: np.ndarray, captions: Sequence[str], image_attention: np.ndarray,
                         text_attention: np.ndarray, tokens: Sequence[Sequence[str]], path: str,
                         grid: tuple[int, int] | None = None) -> str:
  """images [N, S, S, 3] normalised, captions [N], image_attention [N, P] (P = rows * cols patches, row-major),
  text_attention [N, L], tokens: [N] lists of token strings (`token_strings`; attention past their length is left
  out) -> per example, the image with the caption's attention over its patches as a heatmap, and the caption's
  tokens shaded by the image's attention over them. grid: the patch grid, None for a square one."""
  grid = _patch_grid(np.shape(image_attention)[1], grid)
  fig, axes = _rows_figure(len(images), 2.6, (1, 3))
  for i, (image_ax, text_ax) in enumerate(axes):
    height, width = images[i].shape[:2]
    _show_image(image_ax, images[i])
    image_ax.imshow(np.reshape(image_attention[i], grid), cmap='jet', alpha=0.45, interpolation='bilinear',
                    extent=(-0.5, width - 0.5, height - 0.5, -0.5))
    image_ax.set_title(f'example {i}', fontsize=9)
    text_ax.axis('off')
    text_ax.set_title(textwrap.shorten(captions[i], 90), fontsize=9, loc='left')
    _shaded_tokens(text_ax, tokens[i], np.asarray(text_attention[i])[:len(tokens[i])])
  fig.suptitle('COSMOS cross-attention, mean over heads. Left: the patches the caption attends to; right: the '
               'tokens the image attends to', fontsize=10)
  return save_figure(fig, path)


# --------------------------------------------------------------------------------------------------- per eval set


def write_eval_plots(encoder, eval_set, out_dir: str, image_emb: np.ndarray | None = None,
                     text_emb: np.ndarray | None = None) -> list[str]:
  """Every plot that applies to `eval_set`, as `out_dir/<dataset>_{tsne,affinity_hist,retrieval}.png`; returns the
  paths written. t-SNE needs labels and class names, the other two captions.

  image_emb [N, d] = encoder.images(eval_set.images) and text_emb [T, d] = encoder.texts(eval_set.captions) (every
  caption) when the caller already has them; otherwise they are computed.
  """
  class_names = tuple(eval_set.class_names or ())
  labels = None if eval_set.labels is None else np.asarray(eval_set.labels)
  has_labels = bool(class_names) and labels is not None and bool(np.any(labels >= 0))
  has_captions = bool(len(eval_set.captions))
  if not (has_labels or has_captions):
    return []
  if image_emb is None:
    image_emb = encoder.images(eval_set.images)
  name = getattr(eval_set, 'name', 'eval')
  written = []
  if has_labels:
    written.append(plot_tsne(image_emb, labels, class_names, paths.join(out_dir, f'{name}_tsne.png'),
                           title=f'{name}: t-SNE of image embeddings'))
  if has_captions:
    if text_emb is None:
      text_emb = encoder.texts(eval_set.captions)
    # As the affinity evaluator: each image paired with its first caption.
    images, captions = first_captions(eval_set.caption_image)
    per_query = per_query_affinity_consistency(image_emb[images], text_emb[captions])
    written.append(plot_affinity_histogram(per_query, paths.join(out_dir, f'{name}_affinity_hist.png'), label=name))
    written.append(plot_retrieval_examples(eval_set.images, eval_set.captions, eval_set.caption_image, image_emb,
                                         text_emb, paths.join(out_dir, f'{name}_retrieval.png'),
                                         title=f'{name}: image -> caption retrieval'))
  return written


def write_cross_attention_plot(objective, params: dict, model_state: dict, eval_set, out_dir: str,
                               num_examples: int = 4) -> str | None:
  """`out_dir/<dataset>_cross_attention.png` for the first `num_examples` images with a caption (each with its first
  caption), from the student's `params`; None when the objective has no cross-attention or the set no captions."""
  cosmos = cosmos_objective(objective)
  if cosmos is None or not len(eval_set.captions):
    return None
  images, first = (x[:num_examples] for x in first_captions(eval_set.caption_image))
  captions = [eval_set.captions[j] for j in first]
  tokenizer = tokenizer_for(cosmos.model.text)
  tokens = tokenizer(captions, context_length=cosmos.model.text.context_length)
  image_attention, text_attention = cross_attention_maps(objective, params, model_state, eval_set.images[images],
                                                         tokens)
  name = getattr(eval_set, 'name', 'eval')
  return plot_cross_attention(eval_set.images[images], captions, image_attention, text_attention,
                              [token_strings(row, tokenizer) for row in tokens],
                              paths.join(out_dir, f'{name}_cross_attention.png'))
