"""curves.png (training/curves.py) read off the matplotlib figure before it is saved: a grid of at most three panels
a row, one colour per metric in every panel, and chance lines drawn, labelled and inside the axes; from synthetic
metrics.jsonl records, no training."""
import json

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from PIL import Image

from vlp_jax.evaluation import plots
from vlp_jax.training import curves

DATASETS = ('synthetic', 'synthetic_long', 'synthetic_sketch', 'synthetic_studio', 'synthetic_web')
SCORES = ('affinity_consistency', 't2i_r1', 'i2t_r1')
CHANCE_KEYS = {'zeroshot_top1': 'zeroshot_chance', 'i2t_r1': 'i2t_r1_chance', 't2i_r1': 't2i_r1_chance'}


def _records(datasets=DATASETS, eval_steps=(20, 40), seed=0):
  """Training losses every 10 steps and, at `eval_steps`, per dataset scores in a different order and subset each
  (the order a panel meets its metrics in must not pick their colours), chance levels near 0 (i2t and t2i sharing
  theirs, as retrieval on the embedded set does) and zero-shot on the first dataset only."""
  rng = np.random.default_rng(seed)
  records = [{'step': s, 'train/loss': float(5 - s / 20)} for s in range(10, 50, 10)]
  for step in eval_steps:
    record = {'step': step}
    for i, dataset in enumerate(datasets):
      metrics = (('zeroshot_top1',) if i == 0 else ()) + SCORES[i % 3:] + SCORES[:i % 3]
      if i == 0:
        record[f'eval/{dataset}/zeroshot_chance'] = 1 / 36
      for metric in metrics:
        record[f'eval/{dataset}/{metric}'] = float(rng.uniform(0.0, 0.9))
      chance = float(rng.uniform(1e-4, 2e-3))
      record[f'eval/{dataset}/i2t_r1_chance'] = record[f'eval/{dataset}/t2i_r1_chance'] = chance
    records.append(record)
  return records


def _score_lines(ax):
  return [line for line in ax.get_lines() if not line.get_label().endswith(curves.CHANCE_LABEL)]


def _chance_lines(ax):
  return [line for line in ax.get_lines() if line.get_label().endswith(curves.CHANCE_LABEL)]


@pytest.mark.parametrize('num_panels', [1, 2, 3, 4, 6, 7, 10])
def test_grid_shape_holds_every_panel_in_at_most_three_columns(num_panels):
  rows, columns = curves.grid_shape(num_panels)
  assert columns <= curves.MAX_COLUMNS and rows * columns >= num_panels
  assert (rows - 1) * columns < num_panels  # no empty row
  assert columns == min(num_panels, curves.MAX_COLUMNS)


def test_curves_are_a_grid_of_panels_not_one_row():
  fig = curves.curves_figure(_records())
  panels = 1 + len(DATASETS)
  assert len(fig.axes) == panels  # the grid's empty cells are removed
  rows, columns = curves.grid_shape(panels)
  assert rows > 1
  for ax in fig.axes:
    assert ax.get_subplotspec().get_geometry()[:2] == (rows, columns)
  assert [ax.get_title() for ax in fig.axes] == ['training loss', *DATASETS]
  width, height = fig.get_size_inches()
  assert width <= curves.PANEL_INCHES[0] * curves.MAX_COLUMNS and width / height < 3  # not a strip


def test_a_metric_has_one_colour_in_every_panel():
  fig = curves.curves_figure(_records())
  colours = {}
  for ax in fig.axes:
    for line in _score_lines(ax):
      colours.setdefault(line.get_label(), set()).add(to_rgba(line.get_color()))
  assert {'i2t_r1', 't2i_r1', 'affinity_consistency', 'zeroshot_top1'} <= set(colours)
  for metric, seen in colours.items():
    assert seen == {plots.metric_colour(metric)}, metric
  assert len({next(iter(seen)) for seen in colours.values()}) == len(colours)  # and no two metrics share one
  for ax in fig.axes:  # each chance line in its metric's colour
    for line in _chance_lines(ax):
      assert to_rgba(line.get_color()) == plots.metric_colour(line.get_label().removesuffix(curves.CHANCE_LABEL))
  legend = {text.get_text(): handle for text, handle in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles)}
  for metric in colours:
    assert to_rgba(legend[metric].get_color()) == plots.metric_colour(metric)


def test_chance_lines_near_zero_are_drawn_inside_the_axes_and_labelled():
  records = _records()
  fig = curves.curves_figure(records)
  latest = {k: v for r in records for k, v in r.items()}
  for ax, dataset in zip(fig.axes[1:], DATASETS):
    lines = {line.get_label(): line for line in _chance_lines(ax)}
    assert {'i2t_r1 chance', 't2i_r1 chance'} <= set(lines)
    lo, hi = ax.get_ylim()
    for label, line in lines.items():
      level = latest[f'eval/{dataset}/{CHANCE_KEYS[label.removesuffix(curves.CHANCE_LABEL)]}']
      np.testing.assert_allclose(line.get_ydata(), level)
      assert lo + 0.03 * (hi - lo) < level < hi - 0.03 * (hi - lo)  # clear of the frame, not on the x axis
      assert line.get_linestyle() not in ('-', 'None') and line.get_linewidth() >= 1.5
  assert any('chance' in text.get_text() for text in fig.legends[0].get_texts())


def test_interleaved_dashes_shift_only_lines_at_the_same_level():
  dashes = curves.interleaved_dashes([0.01, 0.2, 0.01, 0.01])
  offsets = [offset for offset, _ in dashes]
  assert len({offsets[0], offsets[2], offsets[3]}) == 3 and offsets[1] == 0
  assert dashes[1][1][1] == curves.DASH  # a line alone keeps even dashes
  for offset, (on, off) in dashes:
    assert on == curves.DASH and off >= curves.DASH


def test_padded_limits_hold_zero_and_every_value_with_a_margin():
  lo, hi = curves.padded_limits([0.001, 0.5, -0.2])
  assert lo < -0.2 and hi > 0.5
  lo, hi = curves.padded_limits([0.3])
  assert lo < 0 < 0.3 < hi
  assert curves.padded_limits([])[0] < 0 < curves.padded_limits([])[1]


def test_plot_curves_writes_a_png_readable_at_a_glance(tmp_path):
  assert curves.plot_curves(str(tmp_path)) is None  # no metrics.jsonl
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in _records()[4:]))
  assert curves.plot_curves(str(tmp_path)) is None  # eval scores but no training loss
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in _records()))
  path = curves.plot_curves(str(tmp_path))
  assert path == str(tmp_path / 'curves.png')
  with Image.open(path) as image:
    width, height = image.size
  assert width <= 2000 and width / height < 3


def test_a_run_without_evaluation_gets_the_loss_panel_alone():
  fig = curves.curves_figure(_records(datasets=()))
  assert [ax.get_title() for ax in fig.axes] == ['training loss']
  assert fig.axes[0].get_subplotspec().get_geometry()[:2] == (1, 1)
