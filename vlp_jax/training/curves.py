"""Training curves as a PNG beside metrics.jsonl: the loss, and per eval set its headline scores against their chance
levels, in a grid of at most `MAX_COLUMNS` panels a row. A metric has the same colour in every panel (and in the
evaluation plots: `plots.metric_colour`); its chance level is a dashed line of that colour."""
from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from vlp_jax import paths
from vlp_jax.evaluation.plots import metric_colour, save_figure
from vlp_jax.evaluation.results import chance_level
from vlp_jax.training.writer import read_metrics

# The scores drawn per eval set, in legend order; an eval set with none of them gets no panel.
CURVE_METRICS = ('zeroshot_top1', 'linear_probe_top1', 'i2t_r1', 't2i_r1', 'compositional_acc',
                 'affinity_consistency', 'segmentation_miou')
MAX_COLUMNS = 3
PANEL_INCHES = (5.0, 3.4)  # width, height of one panel
CHANCE_STYLE = {'linewidth': 1.6, 'alpha': 0.9}
DASH = 5.0  # points: a chance line's dash length
Y_MARGIN = 0.06  # of the y range, below and above, so that a line at 0 or at the top stays clear of the frame
CHANCE_LABEL = ' chance'  # suffix of a chance line's label: '<metric> chance'


def _series(records: list[dict], name: str) -> tuple[list[int], list[float]]:
  points = [(r['step'], r[name]) for r in records if name in r]
  return [p[0] for p in points], [p[1] for p in points]


def eval_datasets(records: list[dict]) -> list[str]:
  """The eval sets with at least one of `CURVE_METRICS` in `records`, sorted."""
  return sorted({k.split('/')[1] for r in records for k in r
                 if k.startswith('eval/') and k.split('/', 2)[2] in CURVE_METRICS})


def grid_shape(num_panels: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
  """(rows, columns) of the smallest grid of at most `max_columns` columns that holds `num_panels`."""
  columns = max(1, min(max_columns, num_panels))
  return math.ceil(num_panels / columns), columns


def padded_limits(values: list[float]) -> tuple[float, float]:
  """y limits holding 0 and every value, with `Y_MARGIN` of the range on each side (a fixed margin when flat)."""
  lo, hi = min([0.0, *values]), max([0.0, *values])
  pad = Y_MARGIN * (hi - lo) if hi > lo else 0.05
  return lo - pad, hi + pad


def interleaved_dashes(levels: list[float]) -> list[tuple[float, tuple[float, float]]]:
  """Per horizontal line at `levels`, a dash pattern (offset, (on, off)) in points: lines at the same level (i2t and
  t2i share a chance level) take turns along it, so that each colour shows instead of the last one drawn."""
  out = []
  for i, level in enumerate(levels):
    same = [j for j, other in enumerate(levels) if math.isclose(other, level, rel_tol=1e-9, abs_tol=1e-12)]
    out.append((DASH * same.index(i), (DASH, DASH * max(1, len(same) - 1))))
  return out


def _score_panel(ax, records: list[dict], latest: dict, dataset: str) -> None:
  """One eval set's `CURVE_METRICS` over steps, each with its chance level (the latest reported) where it has one."""
  drawn, chances = [], []
  for metric in CURVE_METRICS:
    name = f'eval/{dataset}/{metric}'
    steps, values = _series(records, name)
    if not steps:
      continue
    ax.plot(steps, values, color=metric_colour(metric), marker='o', markersize=4, label=metric)
    drawn += values
    chance = chance_level(latest, name)
    if chance is not None:
      chances.append((metric, chance))
  for (metric, chance), dashes in zip(chances, interleaved_dashes([c for _, c in chances])):
    ax.axhline(chance, color=metric_colour(metric), linestyle=dashes, label=metric + CHANCE_LABEL, **CHANCE_STYLE)
  ax.set(xlabel='step', ylabel='score', title=dataset, ylim=padded_limits(drawn + [c for _, c in chances]))
  ax.grid(alpha=0.3)


def _legend_handles(fig: Figure) -> list[Line2D]:
  """One entry per metric drawn in any panel, in its colour, and one for the chance style."""
  labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
  metrics = ['train/loss'] * ('train/loss' in labels) + [m for m in CURVE_METRICS if m in labels]
  handles = [Line2D([], [], color=metric_colour(m), marker='o' if m != 'train/loss' else None, label=m)
             for m in metrics]
  if any(label.endswith(CHANCE_LABEL) for label in labels):
    handles.append(Line2D([], [], color='dimgray', linestyle=(0, (DASH, DASH)),
                          label="chance level (dashed, in its metric's colour)", **CHANCE_STYLE))
  return handles


def curves_figure(records: list[dict]) -> Figure | None:
  """metrics.jsonl's records -> the figure of the training loss and one panel per eval set (`eval_datasets`), laid
  out by `grid_shape`, with one legend for all panels below them; None without a training loss."""
  if not any('train/loss' in r for r in records):
    return None
  latest = {k: v for r in records for k, v in r.items()}
  datasets = eval_datasets(records)
  rows, columns = grid_shape(1 + len(datasets))
  fig = Figure(figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows + 0.6), layout='constrained')
  axes = fig.subplots(rows, columns, squeeze=False).ravel()
  axes[0].plot(*_series(records, 'train/loss'), color=metric_colour('train/loss'), label='train/loss')
  axes[0].set(xlabel='step', ylabel='loss', title='training loss')
  axes[0].grid(alpha=0.3)
  for ax, dataset in zip(axes[1:], datasets):
    _score_panel(ax, records, latest, dataset)
  for ax in axes[1 + len(datasets):]:  # the grid's empty cells
    fig.delaxes(ax)
  handles = _legend_handles(fig)
  fig.legend(handles=handles, loc='outside lower center', ncols=min(len(handles), 4), fontsize=9, frameon=False)
  return fig


def plot_curves(workdir: str) -> str | None:
  """Write `workdir/curves.png` from metrics.jsonl; returns its path, or None when there is nothing to plot."""
  fig = curves_figure(read_metrics(workdir))
  return None if fig is None else save_figure(fig, paths.join(workdir, 'curves.png'))
