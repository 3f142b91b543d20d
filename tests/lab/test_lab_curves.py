"""The learning-curve protocol's harness: per-evaluation rows (lab/runner.py), the learning-rate override and its
choice (lab/methods.py, lab/curves.py), the curve statistics (lab/statistics.py: equal-FLOPs reading, Holm, TOST,
detectable effect) and the curves table and plot, each against an independent naive reference."""
import json
import pathlib
import subprocess

import numpy as np
import pytest
import scipy.stats

from lab import catalogue, curves, methods, runner, statistics, tables


def write_metrics(workdir, records):
  workdir.mkdir(parents=True, exist_ok=True)
  with open(workdir / 'metrics.jsonl', 'w') as f:
    for record in records:
      f.write(json.dumps(record) + '\n')


RECORDS = [
    {'step': 100, 'train/loss': 3.0, 'perf/samples_per_sec': 100.0, 'perf/step_flops': 2.0e9},
    {'step': 200, 'eval/synthetic/zeroshot_top1': 0.1, 'eval/synthetic/i2t_r1': 0.2, 'eval/synthetic/t2i_r1': 0.4},
    {'step': 400, 'eval/synthetic/zeroshot_top1': 0.3, 'eval/synthetic/i2t_r1': 0.5, 'eval/synthetic/t2i_r1': 0.7},
    {'step': 400, 'eval/synthetic_long/i2t_r1': 0.1, 'eval/synthetic_long/t2i_r1': 0.3,
     'perf/samples_per_sec': 300.0},  # a second record of the same evaluation
    {'step': 400, 'eval/synthetic/zeroshot_top1': 0.35},  # a resumed run's evaluation again: the latest counts
]


def test_evaluations_are_parsed_by_step_with_their_cumulative_flops(tmp_path):
  write_metrics(tmp_path, RECORDS)
  found = runner.evaluations(str(tmp_path))
  assert [e['step'] for e in found] == [200, 400]
  assert [e['train_flops'] for e in found] == [2.0e9 * 200, 2.0e9 * 400]
  assert found[0]['metrics']['synthetic/mean_r1'] == pytest.approx(0.3)
  assert found[1]['metrics']['synthetic/zeroshot_top1'] == 0.35
  assert found[1]['metrics']['synthetic_long/mean_r1'] == pytest.approx(0.2)
  final = runner.final_metrics(str(tmp_path))
  assert final['train_flops'] == 2.0e9 * 400 and final['samples_per_sec'] == 200.0
  assert {k: final[k] for k in found[-1]['metrics']} == found[-1]['metrics']  # the last evaluation is the final row


def fake_run(monkeypatch, records):
  """subprocess.run stands in for training: it writes `records` to the workdir of the command it is given."""
  def run(argv, **kwargs):
    workdir = next((a.split('=', 1)[1] for a in argv if a.startswith('--workdir=')), None)
    if workdir:  # a training command, not git's
      write_metrics(pathlib.Path(workdir), records)
    return subprocess.CompletedProcess(argv, 0, 'abc1234\n', '')
  monkeypatch.setattr(runner.subprocess, 'run', run)


def test_a_curve_row_records_its_rate_and_evaluations_and_a_store_never_mixes_rates(tmp_path, monkeypatch):
  fake_run(monkeypatch, RECORDS)
  store = str(tmp_path / 'store')
  row = runner.train(str(tmp_path / 'w'), 'clip', 0, None, eval_every=200, store=store, lr=2e-3)
  assert row['learning_rate'] == 2e-3 and '--config.optim.lr=0.002' in row['command']
  assert [e['step'] for e in row['evaluations']] == [200, 400]
  assert runner.stored_row(store, 'clip', 0)['evaluations'] == row['evaluations']
  plain = runner.train(str(tmp_path / 'w'), 'clip', 1, None)  # eval at the end only: no evaluations, config's rate
  assert 'evaluations' not in plain and plain['learning_rate'] == 1e-3
  with pytest.raises(ValueError, match='learning rate 0.002, not 0.0005'):
    runner.train(str(tmp_path / 'w'), 'clip', 0, None, store=store, lr=5e-4)
  assert runner.of_rate('/s_x2', 5e-4) == '/s_x2_lr0.0005' and runner.of_rate('/s', None) == '/s'
  assert runner.of_rate('', 1e-3) == ''
  assert runner.run_config('/w', 'cosmos', 0, None, budget=2, lr=5e-4).optim.lr == 5e-4


def test_rows_without_evaluations_still_tabulate_and_leave_the_curves_pending():
  rows = [{'run': name, 'seed': s, 'synthetic/zeroshot_top1': 0.1 * s + (name == 'saco') * 0.05}
          for name in ('clip', 'saco') for s in (0, 1, 2)]
  assert '0.150 ± 0.100' in tables.table(rows, ['clip', 'saco'], {})  # saco's zero-shot over seeds 0-2
  line = curves.curves_table(rows).splitlines()[2]
  assert 'pending (0 of 3)' in line


def test_the_curves_group_is_the_protocols_ten_runs_each_evaluated_every_eighth_at_400_steps():
  assert set(catalogue.GROUPS['curves']) == {'saco', 'slip', 'cosmos', 'zerovl', 'siglip_regions', 'siglip2', 'clip',
                                             'clip_text_pool_augment_ema', 'clip_zerovl_temperature', 'clip_regions'}
  assert catalogue.expand(['curves'], compute_controls=False) == list(catalogue.GROUPS['curves'])
  # `--eval_every=400` at `--budget=8` is every eighth of each run only while every config trains 400 steps
  assert {catalogue.load_config(n).total_steps * catalogue.CURVE_BUDGET // catalogue.CURVE_EVALUATIONS
          for n in catalogue.GROUPS['curves']} == {400}
  assert catalogue.curve_headline('clip_zerovl_temperature') == 'synthetic/rsum'  # its pair's, for a control
  assert catalogue.curve_headline('clip_text_pool_augment_ema') == 'synthetic/mean_r1'
  assert catalogue.curve_headline('siglip_regions') == 'synthetic/zeroshot_top1'  # method and control alike
  with pytest.raises(ValueError, match='exactly one'):
    catalogue.curve_headline('clip', pairs=(('a', 'clip', ('x',)), ('b', 'clip', ('y',))))


def test_the_chosen_rate_is_the_highest_mean_with_ties_to_the_shared_rate():
  assert curves.chosen_rate({5e-4: 0.2, 1e-3: 0.3, 2e-3: 0.31}) == 2e-3
  assert curves.chosen_rate({5e-4: 0.3, 1e-3: 0.3, 2e-3: 0.1}) == 1e-3
  assert curves.chosen_rate({5e-4: 0.1 + 0.2, 1e-3: 0.3, 2e-3: 0.1}) == 1e-3  # equal but for rounding
  with pytest.raises(ValueError, match='does not settle'):
    curves.chosen_rate({5e-4: 0.3, 1e-3: 0.1, 2e-3: 0.3})


def test_the_rates_command_reads_each_rates_store_refuses_missing_rows_and_writes_the_choice(tmp_path):
  names, seeds = ('clip_zerovl_temperature', 'zerovl'), (0, 1, 2)
  # zerovl's RSUM is best at 2e-3; its control's RSUM at 5e-4, though its zero-shot is best at 2e-3
  rsum = {('zerovl', 5e-4): 100, ('zerovl', 1e-3): 110, ('zerovl', 2e-3): 120,
          ('clip_zerovl_temperature', 5e-4): 130, ('clip_zerovl_temperature', 1e-3): 120,
          ('clip_zerovl_temperature', 2e-3): 110}
  for (name, lr), value in rsum.items():
    for seed in seeds:
      if (name, lr, seed) != ('zerovl', 2e-3, 2):
        runner.write_row(curves.rate_store(lr, str(tmp_path / 'r')), {
            'run': name, 'seed': seed, 'synthetic/rsum': value + seed, 'learning_rate': lr,
            'synthetic/zeroshot_top1': lr * 100})
  by_rate = curves.rows_by_rate(names, seeds, store=str(tmp_path / 'r'))
  assert sorted(by_rate) == [5e-4, 1e-3, 2e-3] and len(by_rate[5e-4]) == 6
  with pytest.raises(ValueError, match='1 rows .* zerovl seed 2 at rate 0.002'):
    curves.rate_readings(by_rate, names, seeds)
  by_rate[2e-3].append({'run': 'zerovl', 'seed': 2, 'synthetic/rsum': 122.0})
  readings = curves.rate_readings(by_rate, names, seeds)
  assert readings['zerovl']['learning_rate'] == 2e-3 and readings['zerovl']['means'][2e-3] == 121.0
  assert readings['clip_zerovl_temperature']['learning_rate'] == 5e-4
  path = tmp_path / 'rates.json'
  path.write_text(json.dumps(curves.rates_document(readings)))
  assert curves.read_rates(str(path)) == {'clip_zerovl_temperature': 5e-4, 'zerovl': 2e-3}
  rate_of = methods.run_rates(list(names), None, str(path))
  assert rate_of('zerovl') == 2e-3
  with pytest.raises(ValueError, match="no rate for \\['clip'\\]"):
    methods.run_rates(['clip', *names], None, str(path))
  assert methods.run_rates(['clip'], 5e-4)('clip') == 5e-4 and methods.run_rates(['clip'], None)('clip') is None


def test_log_interpolation_matches_numpy_interp_in_log_flops():
  flops, values = [1e12, 3e12, 9e12, 2e13], [0.1, 0.3, 0.32, 0.5]
  for at in (1e12, 2e12, 3e12, 5.5e12, 1.9e13, 2e13):
    expected = np.interp(np.log(at), np.log(flops), values)
    assert statistics.log_interpolated(flops, values, at) == pytest.approx(expected, abs=1e-12)
  assert statistics.log_interpolated(flops, values, np.sqrt(1e12 * 3e12)) == pytest.approx(0.2)  # the log midpoint
  with pytest.raises(ValueError, match='outside'):
    statistics.log_interpolated(flops, values, 5e11)
  with pytest.raises(ValueError, match='outside'):
    statistics.log_interpolated(flops, values, 3e13)


def test_equal_flops_reads_the_cheaper_run_at_its_end_and_interpolates_the_other():
  cheap = ([1.0, 2.0, 4.0], [0.1, 0.2, 0.4])
  costly = ([2.0, 4.0, 8.0], [0.0, 0.5, 0.9])
  mine, theirs, budget = statistics.equal_flops_values(costly, cheap)
  assert budget == 4.0 and theirs == 0.4 and mine == 0.5
  mine, theirs, budget = statistics.equal_flops_values(([1.0, 3.0], [0.1, 0.7]), ([1.0, 2.0], [0.0, 0.3]))
  assert budget == 2.0 and theirs == 0.3 and mine == pytest.approx(0.1 + 0.6 * np.log(2) / np.log(3))


def test_the_paired_p_value_is_scipys_paired_t_test():
  rng = np.random.default_rng(0)
  for _ in range(5):
    a, b = rng.normal(0.3, 0.05, 3), rng.normal(0.28, 0.05, 3)
    assert statistics.paired_p_value(list(a - b)) == pytest.approx(scipy.stats.ttest_rel(a, b).pvalue, rel=1e-9)
  assert statistics.paired_p_value([0.0, 0.0, 0.0]) == 1.0


def test_holm_matches_a_hand_worked_example():
  # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): 4 * 0.005 = 0.02, 3 * 0.01 = 0.03, 2 * 0.03 = 0.06, max(0.06, 0.04) = 0.06
  assert statistics.holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  # capped at 1 and monotone: 3 * 0.001 = 0.003, 2 * 0.6 = 1.2 -> 1, then max(1, 0.7) = 1
  assert statistics.holm_adjusted([0.6, 0.7, 0.001]) == pytest.approx([1.0, 1.0, 0.003])
  # monotone without the cap: 2 * 0.4 = 0.8, then max(0.8, 0.45) = 0.8
  assert statistics.holm_adjusted([0.4, 0.45, 0.001]) == pytest.approx([0.8, 0.8, 0.003])
  # six headlines at 0.05 family-wise: only the smallest survives (0.008 * 6 = 0.048; 0.012 * 5 = 0.06)
  adjusted = statistics.holm_adjusted([0.2, 0.012, 0.008, 0.5, 0.03, 0.9])
  assert [p <= 0.05 for p in adjusted] == [False, False, True, False, False, False]


def test_level_is_both_one_sided_tests_inside_the_margin():
  rng = np.random.default_rng(1)
  outcomes = set()
  for _ in range(200):
    d = rng.normal(rng.uniform(-0.03, 0.03), rng.uniform(0.001, 0.02), 3)
    lower = scipy.stats.ttest_1samp(d, -0.03, alternative='greater').pvalue
    upper = scipy.stats.ttest_1samp(d, 0.03, alternative='less').pvalue
    expected = lower < 0.05 and upper < 0.05
    assert statistics.is_level(list(d), 0.03) == expected
    outcomes.add(expected)
  assert outcomes == {True, False}  # both readings occur
  assert not statistics.is_level([0.0, 0.001, -0.001], None)
  assert statistics.level_margin('synthetic/rsum') == 18.0
  assert statistics.level_margin('synthetic/segmentation_miou') is None


def test_the_detectable_effect_has_80_percent_power_by_simulation_and_matches_the_protocols_table():
  effect = statistics.detectable_effect(0.04, 3)
  rng = np.random.default_rng(2)
  d = rng.normal(effect, 0.04, (40000, 3))
  t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(3))
  assert np.mean(np.abs(t) > scipy.stats.t.ppf(0.975, 2)) == pytest.approx(0.8, abs=0.01)
  planned = [statistics.detectable_effect(curves.PLANNING_SDS[m], 3) for m in
             ('saco', 'slip', 'cosmos', 'zerovl', 'siglip_regions', 'siglip2')]
  assert [round(p, 2 if p < 1 else -0) for p in planned] == [0.13, 0.34, 0.12, 183, 0.14, 0.06]


def curve_row(run, seed, flops_per_step, zeroshot, steps=(400, 800, 1200, 1600)):
  """A stored curve row: its evaluations of zero-shot top-1 at `steps`, the last one also as the final metric."""
  return {'run': run, 'seed': seed, 'synthetic/zeroshot_top1': zeroshot[-1], 'train_flops': flops_per_step * steps[-1],
          'evaluations': [{'step': s, 'train_flops': flops_per_step * s, 'metrics': {'synthetic/zeroshot_top1': z}}
                          for s, z in zip(steps, zeroshot)]}


def synthetic_rows():
  """SLIP costs twice CLIP's FLOPs per step: at equal FLOPs it is read at its 800-step evaluation."""
  rows = []
  for seed, shift in zip(catalogue.CURVE_SEEDS, (0.0, 0.02, -0.01)):
    rows.append(curve_row('clip', seed, 1e9, [0.3 + shift, 0.5 + shift, 0.6 + shift, 0.65 + shift]))
    rows.append(curve_row('slip', seed, 2e9, [0.2 + shift, 0.45 + 2 * shift, 0.62 + shift, 0.75 + 3 * shift]))
  return rows


def test_the_curves_table_reads_the_end_and_equal_flops_against_a_naive_recomputation():
  rows = synthetic_rows()
  entries = curves.curve_entries(rows, pairs=(('slip', 'clip', ('synthetic/zeroshot_top1',)),))
  d = entries[0]['differences']
  by = {(r['run'], r['seed']): r for r in rows}
  end = [by[('slip', s)]['synthetic/zeroshot_top1'] - by[('clip', s)]['synthetic/zeroshot_top1']
         for s in catalogue.CURVE_SEEDS]
  equal = []
  for s in catalogue.CURVE_SEEDS:
    slip = by[('slip', s)]['evaluations']
    at = 1e9 * 1600  # CLIP's total, the smaller
    equal.append(np.interp(np.log(at), [np.log(e['train_flops']) for e in slip],
                           [e['metrics']['synthetic/zeroshot_top1'] for e in slip])
                 - by[('clip', s)]['synthetic/zeroshot_top1'])
  assert d['end'] == pytest.approx(end) and d['equal_flops'] == pytest.approx(equal)
  assert d['flops'] == [1.6e12] * 3
  assert entries[0]['p'] == pytest.approx(scipy.stats.ttest_1samp(end, 0.0).pvalue)
  assert entries[0]['holm'] == entries[0]['p']  # a family of one
  lines = curves.curves_table(rows).splitlines()
  slip_line = next(line for line in lines if line.startswith('| `slip` − `clip`'))
  cells = [c.strip() for c in slip_line.split('|')[1:-1]]
  mean, low, high = statistics.paired_interval(end)
  assert cells[2] == '21,22,23' and cells[3] == f'{mean:+.3f} [{low:+.3f}, {high:+.3f}] ahead'
  assert cells[4].endswith(': confirmed') or cells[4].endswith(': not confirmed')
  mean, low, high = statistics.paired_interval(equal)
  word = 'ahead' if low > 0 else 'behind' if high < 0 else 'not distinguishable'
  assert cells[6] == f'2: {mean:+.3f} [{low:+.3f}, {high:+.3f}] {word}'  # F = 1.6e12 FLOPs, printed in TFLOP
  assert cells[7] == '-'  # these rows have no evaluation of the novel subset
  realised = statistics.detectable_effect(float(np.std(end, ddof=1)), 3)
  assert cells[8] == f'0.336 / {realised:.3f}'
  saco_line = next(line for line in lines if line.startswith('| `saco` − `clip`'))
  assert 'pending (0 of 3)' in saco_line


def test_the_novel_subset_is_read_at_the_end_beside_the_full_set():
  novel = {('clip', 21): 0.20, ('clip', 22): 0.25, ('clip', 23): 0.22,
           ('slip', 21): 0.30, ('slip', 22): 0.31, ('slip', 23): 0.35}
  rows = []
  for row in synthetic_rows():
    evaluations = [dict(e, metrics=dict(e['metrics'])) for e in row['evaluations']]
    evaluations[-1]['metrics']['synthetic_novel/zeroshot_top1'] = novel[(row['run'], row['seed'])]
    evaluations[0]['metrics']['synthetic_novel/zeroshot_top1'] = 0.0  # an earlier evaluation: not the end point
    rows.append({**row, 'evaluations': evaluations})
  (entry,) = curves.curve_entries(rows, pairs=(('slip', 'clip', ('synthetic/zeroshot_top1',)),))
  expected = [novel[('slip', s)] - novel[('clip', s)] for s in catalogue.CURVE_SEEDS]
  assert entry['differences']['novel_end'] == pytest.approx(expected)
  line = next(line for line in curves.curves_table(rows).splitlines() if line.startswith('| `slip` − `clip`'))
  mean, low, high = statistics.paired_interval(expected)
  assert [c.strip() for c in line.split('|')[1:-1]][7] == f'{mean:+.3f} [{low:+.3f}, {high:+.3f}] ahead'
  assert curves.novel_key('synthetic_long/mean_r1') == 'synthetic_long_novel/mean_r1'
  assert curves.novel_key('within_source/affinity_consistency') is None
  assert curves.novel_key('synthetic_web/mean_r1') is None


def test_holm_runs_over_the_headlines_with_seeds_only():
  rows = synthetic_rows()
  rows += [{**r, 'run': 'saco', 'evaluations': [{**e, 'metrics': {'synthetic/zeroshot_top1':
                                                                   e['metrics']['synthetic/zeroshot_top1'] + 0.01 * k}}
                                                for e in r['evaluations']]}
           for k, r in enumerate(r for r in synthetic_rows() if r['run'] == 'clip')]
  entries = curves.curve_entries(rows)
  family = [e for e in entries if e['p'] is not None]
  assert [(e['method'], e['metric']) for e in family] == [('saco', 'synthetic/zeroshot_top1'),
                                                          ('slip', 'synthetic/zeroshot_top1')]
  assert [e['holm'] for e in family] == pytest.approx(statistics.holm_adjusted([e['p'] for e in family]))
  assert all(not e['headline'] or e['p'] is not None for e in entries if e['seeds'])


def test_the_pair_plot_draws_each_seed_and_the_mean_on_a_log_flops_axis():
  rows = synthetic_rows()
  figure = curves.pair_figure(rows, 'slip', 'clip', ('synthetic/zeroshot_top1', 'synthetic/linear_probe_top1'))
  first, second = figure.axes[:2]
  assert first.get_xscale() == 'log' and len(first.lines) == 2 * (3 + 1)  # three seeds and a mean, each run
  mean = first.lines[3]
  assert list(mean.get_xdata()) == pytest.approx([8e11, 1.6e12, 2.4e12, 3.2e12])
  assert list(mean.get_ydata()) == pytest.approx(
      np.mean([[0.2 + s, 0.45 + 2 * s, 0.62 + s, 0.75 + 3 * s] for s in (0.0, 0.02, -0.01)], axis=0))
  assert not second.lines  # no rows have the linear probe: an empty panel
  flops, values = curves.mean_curve([([1, 2, 3], [0.1, 0.2, 0.3]), ([1, 2], [0.3, 0.4])])  # the shorter's length
  assert flops == pytest.approx([1, 2]) and values == pytest.approx([0.2, 0.3])
