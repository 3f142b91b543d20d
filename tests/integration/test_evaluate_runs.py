"""benchmarks/evaluate_runs.py: the table's trained runs evaluated again at this commit (the evaluation command as a
user runs it, mocked here), each row naming both commits; runs without their final checkpoint left out; the table
of means beside chance."""
import json
import os

import pytest

from benchmarks import evaluate_runs, methods


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
  final = methods.config_steps('siglip2')
  os.makedirs(os.path.join(methods.run_dir(workdir, 'siglip2', 0), 'checkpoints', str(final)))
  os.makedirs(os.path.join(methods.run_dir(workdir, 'siglip2', 1), 'checkpoints', str(final - 100)))  # unfinished
  for seed in (0, 1):
    methods.write_row(store, {'run': 'siglip2', 'seed': seed, 'commit': '82f0844'})
  calls = []
  monkeypatch.setattr(evaluate_runs.subprocess, 'run', fake_evaluation(calls, 0.42))
  monkeypatch.setattr(methods, 'code_commit', lambda: 'abc1234')
  args = (workdir, store, output, ['captioning'], ['synthetic'])
  row = evaluate_runs.evaluate_run('siglip2', 0, *args)
  assert row['synthetic/captioning_cider'] == 0.42 and row['synthetic/captioning_cider_chance'] == 0.1
  assert (row['commit'], row['trained_commit']) == ('abc1234', '82f0844')
  assert calls[0][1:4] == ['-m', 'vlp_jax.evaluate', f'--checkpoint={methods.run_dir(workdir, "siglip2", 0)}']
  assert '--evals=captioning' in calls[0] and '--datasets=synthetic' in calls[0]
  assert evaluate_runs.evaluate_run('siglip2', 0, *args) == row and len(calls) == 1  # stored: not run again
  assert evaluate_runs.evaluate_run('siglip2', 1, *args) is None  # no final checkpoint
  assert evaluate_runs.evaluate_run('siglip2_decoder_only', 0, *args) is None  # no workdir, no stored row
  assert len(calls) == 1


def test_a_failed_evaluation_says_which_run(tmp_path, monkeypatch):
  workdir, store = str(tmp_path / 'w'), str(tmp_path / 'store')
  os.makedirs(os.path.join(methods.run_dir(workdir, 'siglip2', 0), 'checkpoints',
                           str(methods.config_steps('siglip2'))))
  methods.write_row(store, {'run': 'siglip2', 'seed': 0, 'commit': 'x'})
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
