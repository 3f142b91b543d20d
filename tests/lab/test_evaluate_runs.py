"""lab/evaluate_runs.py: the table's trained runs evaluated again at this commit (the evaluation command as a
user runs it, mocked here), each row naming both commits; runs without their final checkpoint left out; the table
of means beside chance."""
import json
import os

import numpy as np
import pytest

from lab import evaluate_runs, runner


def fake_evaluation(calls, cider):
  """A stand-in for `python -m vlp_jax.evaluate` that writes what the command writes into its --output_dir."""
  def run(command, **kwargs):
    calls.append(command)
    out_dir = next(a.split('=', 1)[1] for a in command if a.startswith('--output_dir='))
    os.makedirs(out_dir)
    metrics = {'eval/synthetic/captioning_cider': cider, 'eval/synthetic/captioning_cider_chance': 0.1}
    with open(os.path.join(out_dir, 'eval_results.json'), 'w') as f:
      json.dump({'metrics': metrics}, f)
    return type('Done', (), {'returncode': 0, 'stderr': ''})()
  return run


def test_each_trained_run_is_evaluated_once_and_records_both_commits(tmp_path, monkeypatch):
  workdir, store, output = str(tmp_path / 'w'), str(tmp_path / 'store'), str(tmp_path / 'out')
  final = runner.config_steps('siglip2')
  os.makedirs(os.path.join(runner.run_dir(workdir, 'siglip2', 0), 'checkpoints', str(final)))
  os.makedirs(os.path.join(runner.run_dir(workdir, 'siglip2', 1), 'checkpoints', str(final - 100)))  # unfinished
  for seed in (0, 1):
    runner.write_row(store, {'run': 'siglip2', 'seed': seed, 'commit': '82f0844'})
  calls = []
  monkeypatch.setattr(evaluate_runs.subprocess, 'run', fake_evaluation(calls, 0.42))
  monkeypatch.setattr(runner, 'code_commit', lambda: 'abc1234')
  args = (workdir, store, output, ['captioning'], ['synthetic'])
  row = evaluate_runs.evaluate_run('siglip2', 0, *args)
  assert row['synthetic/captioning_cider'] == 0.42 and row['synthetic/captioning_cider_chance'] == 0.1
  assert (row['commit'], row['trained_commit']) == ('abc1234', '82f0844')
  assert calls[0][1:4] == ['-m', 'vlp_jax.evaluate', f'--checkpoint={runner.run_dir(workdir, "siglip2", 0)}']
  assert '--evals=captioning' in calls[0] and '--datasets=synthetic' in calls[0]
  assert evaluate_runs.evaluate_run('siglip2', 0, *args) == row and len(calls) == 1  # stored: not run again
  assert evaluate_runs.evaluate_run('siglip2', 1, *args) is None  # no final checkpoint
  assert evaluate_runs.evaluate_run('siglip2_decoder_only', 0, *args) is None  # no workdir, no stored row
  assert len(calls) == 1


def test_a_failed_evaluation_says_which_run(tmp_path, monkeypatch):
  workdir, store = str(tmp_path / 'w'), str(tmp_path / 'store')
  os.makedirs(os.path.join(runner.run_dir(workdir, 'siglip2', 0), 'checkpoints',
                           str(runner.config_steps('siglip2'))))
  runner.write_row(store, {'run': 'siglip2', 'seed': 0, 'commit': 'x'})
  monkeypatch.setattr(evaluate_runs.subprocess, 'run',
                      lambda *a, **k: type('Failed', (), {'returncode': 2, 'stderr': 'bad flag'})())
  with pytest.raises(RuntimeError, match=r'siglip2 \(seed 0\).*exit code 2:\nbad flag'):
    evaluate_runs.evaluate_run('siglip2', 0, workdir, store, str(tmp_path / 'out'), ['captioning'], ['synthetic'])
  assert not os.path.exists(tmp_path / 'out')  # nothing stored


def test_the_table_gives_each_runs_mean_and_std_beside_chance():
  rows = [{'run': 'siglip2', 'seed': s, 'synthetic/captioning_cider': c, 'synthetic/captioning_cider_chance': 0.1}
          for s, c in ((0, 0.4), (1, 0.6))] + [{'run': 'siglip_regions', 'seed': 0}]
  table = evaluate_runs.metric_table(rows, ['siglip_regions', 'siglip2', 'siglip2_decoder_only'])
  assert table.split('\n') == [
      '| run | seeds | synthetic/captioning_cider (chance) |', '|---|---|---|',
      '| `siglip_regions` | 0 | - |',
      '| `siglip2` | 0,1 | 0.500 ± 0.141 (0.100) |']


def test_noevaluate_reads_stored_evaluations_only(tmp_path, monkeypatch):
  workdir, store, output = str(tmp_path / 'w'), str(tmp_path / 'store'), str(tmp_path / 'out')
  for seed in (0, 1):  # both runs trained to the end, only seed 0 evaluated so far
    os.makedirs(os.path.join(runner.run_dir(workdir, 'siglip2', seed), 'checkpoints',
                             str(runner.config_steps('siglip2'))))
    runner.write_row(store, {'run': 'siglip2', 'seed': seed, 'commit': '82f0844'})
  runner.write_row(output, {'run': 'siglip2', 'seed': 0, 'synthetic/captioning_cider': 0.5})
  calls = []
  monkeypatch.setattr(evaluate_runs.subprocess, 'run', fake_evaluation(calls, 0.42))
  monkeypatch.setattr(runner, 'code_commit', lambda: 'abc1234')
  args = (['siglip2'], [0, 1], workdir, store, output, ['captioning'], ['synthetic'])
  rows = evaluate_runs.collect_rows(*args, evaluate=False)
  assert [r['seed'] for r in rows] == [0] and not calls  # seed 1 left out, nothing evaluated at this commit
  rows = evaluate_runs.collect_rows(*args)
  assert [(r['seed'], r['synthetic/captioning_cider']) for r in rows] == [(0, 0.5), (1, 0.42)] and len(calls) == 1


def test_the_comparison_gives_each_pairs_interval_per_evaluated_metric():
  rows = [{'run': run, 'seed': s, 'synthetic/captioning_cider': c, 'synthetic/captioning_cider_chance': 0.1}
          for run, values in (('siglip2', (1.8, 1.6, 1.7)), ('siglip2_captions_only', (1.5, 1.4, 1.6)))
          for s, c in zip((0, 1, 11), values)]
  lines = evaluate_runs.comparison_table(rows, [('siglip2', 'siglip2_captions_only')]).splitlines()
  assert lines[0] == '| run − other (seeds) | synthetic/captioning_cider |'  # chance levels are not compared
  d = np.array([0.3, 0.2, 0.1])  # naive: mean ± t_{0.975, 2} * s / sqrt(3), t from statistical tables
  half = 4.302653 * d.std(ddof=1) / np.sqrt(3)
  assert lines[2] == (f'| `siglip2` − `siglip2_captions_only` (0,1,11) | '
                      f'{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}] (3/3) |')
