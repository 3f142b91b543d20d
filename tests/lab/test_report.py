"""lab/report.py: benchmarks/RESULTS.md is what the report writes from the stored rows and the readings, its methods
tables are the ones `python -m lab.methods --notrain` prints from the stores, and it stays short."""
import os
import re

import pytest

from benchmarks import aot_table
from lab import report
from lab.catalogue import ROOT


def committed() -> str:
  with open(report.RESULTS_MD) as f:
    return f.read()


def test_the_committed_results_are_what_the_report_writes():
  assert report.first_difference(report.render(), committed()) is None, report.first_difference(
      report.render(), committed())


def test_each_budgets_methods_tables_are_regenerated_from_its_rows_byte_for_byte():
  text = committed()
  first, second = report.methods_tables(1), report.methods_tables(4)
  assert text.count(first) == 1 and text.count(second) == 1
  # the first budget: the headline table, then every run's mean ± std and every run against its controls
  assert first.startswith('| method | control | paper\'s metric |') and first.endswith('198 runs, seeds 0,1,2,11,12,13.')
  assert second.endswith("21 runs, seeds 11,12,13, 4x the configs' steps.")
  assert report.speed_levers_table() in text and report.aot_markdown() in text


def test_a_stored_row_moves_its_table(tmp_path, monkeypatch):
  """The tables read the store: a row that changes there changes the rendered table (and --check would fail)."""
  rows, names, seeds = report.stored_rows(4)
  changed = [{**row, 'synthetic/rsum': row['synthetic/rsum'] + 100.0} if row['run'] == 'zerovl' else row
             for row in rows]
  monkeypatch.setattr(report, 'stored_rows', lambda budget=1: (changed, names, seeds))
  assert report.methods_tables(4) != report.results_block(rows, names, seeds, 4)
  assert report.first_difference(report.render(), committed()) is not None


def test_the_aot_table_is_aot_tables_rows_and_notes_the_older_cosmos_compile():
  lines = report.aot_markdown().split('\n')
  assert lines[0] == aot_table.HEADER and len(lines) == 2 + len(report.aot_rows())
  assert sum('(at c8b97fe, before the batched pairwise loss)' in line for line in lines) == 1
  assert not any('zerovl_multisource' in line and line.endswith('| 227 |') for line in lines)  # the earlier compile


def test_a_generated_line_names_a_generator_and_an_unknown_one_fails():
  for name in report.READINGS:
    for generator in report.GENERATED_LINE.findall(report.reading(name)):
      assert generator in report.GENERATED, (name, generator)
  with pytest.raises(KeyError):
    report.GENERATED_LINE.sub(lambda m: report.GENERATED[m.group(1)](), '<!-- generated: nothing -->')


def test_results_stay_short_and_each_methods_reading_points_at_its_rows():
  assert len(committed().splitlines()) < 500
  for name in ('saco', 'slip', 'cosmos', 'zerovl', 'siglip2'):
    reading = report.reading(name)
    assert len(reading.splitlines()) <= 10 and 'lab/results/methods/' in reading, name
  readings = {os.path.splitext(n)[0] for n in os.listdir(report.READINGS_DIR)}
  assert readings == set(report.READINGS)  # every reading is shown, once


def test_the_plots_and_paths_results_names_exist():
  text = committed()
  for path in re.findall(r'\]\((\.\./[^)#]+)', text):
    assert os.path.exists(os.path.join(ROOT, 'benchmarks', path)), path
  for path in re.findall(r'`((?:lab|benchmarks)/results/[^`*{]+?)/?`', text):
    assert os.path.exists(os.path.join(ROOT, path)), path
  assert report.verdict_plot_path(4).endswith('lab/results/methods_verdicts_x4.png')


def test_first_difference_names_the_line():
  assert report.first_difference('a\nb\n', 'a\nb\n') is None
  assert report.first_difference('a\nb\n', 'a\nc\n') == "line 2: committed 'c', generated 'b'"
  assert report.first_difference('a\nb', 'a') == "line 2: committed '<end>', generated 'b'"


def test_the_verdict_plot_is_drawn_from_the_stored_rows(tmp_path, monkeypatch):
  monkeypatch.setattr(report, 'verdict_plot_path', lambda budget=1: str(tmp_path / f'verdicts_x{budget}.png'))
  report.draw_verdicts(4)
  with open(tmp_path / 'verdicts_x4.png', 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
