"""Issue 64's stall experiment (lab/diagnostics/zerovl_stall.py): its chance levels against a hand calculation, its
threshold reading and its resumability."""
import json
import math
import subprocess

import pytest

from lab.diagnostics import zerovl_stall


def test_chance_levels_against_a_hand_calculation():
  single = zerovl_stall.chance_level('single_source', [1, 1, 1], 128)
  assert single == pytest.approx(4.8520302639)  # ln 128
  # Three equal sources: a source-only model spreads each row over the 128 / 3 pairs of its source.
  assert zerovl_stall.chance_level('mixed', [1, 1, 1], 128) == pytest.approx(math.log(128 / 3))  # 3.7534
  # A quarter and three quarters: (1/4) ln 32 + (3/4) ln 96.
  assert zerovl_stall.chance_level('mixed', [10, 30], 128) == pytest.approx(0.25 * math.log(32) + 0.75 * math.log(96))
  assert zerovl_stall.chance_level('mixed', [5000], 128) == pytest.approx(single)  # one source: nothing to tell
  assert zerovl_stall.cell_chance('mixed', 'three') == pytest.approx(math.log(128 / 3))
  assert zerovl_stall.cell_chance('mixed', 'web') == pytest.approx(single)


def test_first_below_is_the_first_logged_step_under_the_threshold():
  rows = [{'step': 10, 'loss': 4.9}, {'step': 20, 'loss': 4.4}, {'step': 30, 'loss': 4.6}, {'step': 40, 'loss': 4.0}]
  assert zerovl_stall.first_below(rows, 4.5) == 20
  assert zerovl_stall.first_below(rows, 3.0) is None
  shifted = [{**row, 'loss': row['loss'] + 0.1 * i} for i, row in enumerate(rows)]
  assert zerovl_stall.max_gap(rows, shifted) == pytest.approx(0.3)


def test_a_finished_run_is_skipped_and_an_unfinished_one_is_rerun(tmp_path, monkeypatch):
  calls = []
  monkeypatch.setattr(subprocess, 'run', lambda command, **kwargs: calls.append(command))
  path = tmp_path / 'mixed_web_seed1.jsonl'
  path.write_text(json.dumps({'step': 200, 'loss': 1.0}) + '\n')
  assert zerovl_stall.run_one('mixed', 'web', 1, str(tmp_path)) == str(path)
  assert not calls
  path.write_text(json.dumps({'step': 190, 'loss': 1.0}) + '\n')  # stopped short: trained again
  zerovl_stall.run_one('mixed', 'web', 1, str(tmp_path))
  assert len(calls) == 1 and '--config.data.mixing=mixed' in calls[0] and '--config.seed=1' in calls[0]
  assert "--config.data.synthetic.sources=('web',)" in calls[0] and '--stop_at_step=200' in calls[0]
