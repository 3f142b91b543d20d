"""lab/statistics.py and lab/tables.py: means and paired differences, Student-t intervals and verdicts, the
headline, mean and paired tables, the comparison of named pairs and the plot of the verdicts."""
import json

import numpy as np
import pytest

from lab import catalogue, runner, statistics, tables

def test_final_metrics_and_the_table(tmp_path):
  rows = []
  for seed, (zeroshot, i2t, t2i) in enumerate([(0.2, 0.1, 0.3), (0.4, 0.3, 0.5)]):
    workdir = tmp_path / f'seed{seed}'
    workdir.mkdir()
    with open(workdir / 'metrics.jsonl', 'w') as f:
      f.write(json.dumps({'step': 100, 'eval/synthetic/zeroshot_top1': 0.01, 'perf/samples_per_sec': 100.0}) + '\n')
      per_source = {f'eval/{name}/{d}_r1': (k + 1) / 10 + (d == 't2i') / 20
                    for k, name in enumerate(catalogue.SOURCE_SETS) for d in ('i2t', 't2i')}
      per_source.update({f'eval/synthetic_studio/{d}_r{n}': 0.0 for d in ('i2t', 't2i') for n in (5, 10)})
      f.write(json.dumps({'step': 200, 'eval/synthetic/zeroshot_top1': zeroshot, 'eval/synthetic/i2t_r1': i2t,
                          'eval/synthetic/t2i_r1': t2i, 'perf/samples_per_sec': 300.0, **per_source}) + '\n')
    metrics = runner.final_metrics(str(workdir))
    assert metrics['within_source/mean_r1'] == pytest.approx((0.125 + 0.225 + 0.325) / 3)
    assert 'synthetic/rsum' not in metrics  # only R@1 logged: no RSUM
    assert metrics['synthetic_studio/rsum'] == pytest.approx(100 * (0.1 + 0.15))
    assert metrics['synthetic/zeroshot_top1'] == zeroshot  # the last eval, not the first
    assert metrics['synthetic/mean_r1'] == pytest.approx((i2t + t2i) / 2)
    assert metrics['samples_per_sec'] == 200.0
    rows.append({'run': 'clip', 'seed': seed, **metrics, 'wall_seconds': 10.0, 'jobs': 1})
  line = tables.table(rows, ['clip'], {}).splitlines()[2]
  assert '0.300 ± 0.141' in line  # zero-shot mean and sample std of 0.2 and 0.4
  assert '0.300 ± 0.141' in line.split('|')[3]  # mean R@1: 0.2 and 0.4
  assert 'seeds 0,1' in line and '1.00x' in line
  # Speeds only from runs trained alone: with both runs of a shared CPU, no step time.
  shared = tables.table([{**r, 'jobs': 2} for r in rows], ['clip'], {}).splitlines()[2]
  assert shared.split('|')[-2].strip() == '-' and shared.split('|')[-3].strip() == '-'


def test_paired_table_subtracts_the_controls_of_the_same_seed():
  def row(run, seed, zeroshot):
    return {'run': run, 'seed': seed, 'synthetic/zeroshot_top1': zeroshot}
  rows = [row('clip', 0, 0.2), row('clip', 1, 0.4), row('clip_text_pool_augment_ema', 0, 0.1),
          row('clip_text_pool_augment_ema', 1, 0.3),
          row('clip_text_pool_compute', 1, 0.35), row('cosmos', 0, 0.15), row('cosmos', 1, 0.5),
          row('cosmos', 2, 0.9)]  # seed 2 has no control: left out
  lines = tables.paired_table(
      rows, ['clip', 'clip_text_pool_augment_ema', 'clip_text_pool_compute', 'cosmos']).splitlines()
  heads = [line.split('|')[1].strip() for line in lines[2:]]
  assert heads == ['`clip_text_pool_augment_ema` − `clip` (seeds 0,1)',
                   '`clip_text_pool_compute` − `clip` (seeds 1)',
                   '`cosmos` − `clip` (seeds 0,1)', '`cosmos` − `clip_text_pool_augment_ema` (seeds 0,1)',
                   '`cosmos` − `clip_text_pool_compute` (seeds 1)']
  assert lines[4].split('|')[2].strip() == '+0.025 ± 0.106 (1/2)'  # cosmos - clip: -0.05 and +0.1
  assert lines[5].split('|')[2].strip() == '+0.125 ± 0.106 (2/2)'  # cosmos - clip_text_pool_augment_ema: 0.05 and 0.2
  assert lines[5].split('|')[3].strip() == '-'  # a metric the rows do not have


def test_paired_interval_is_students_t_interval():
  # n = 3, mean 2, sample std 1; t_{0.975, 2} = 4.302653 (statistical tables), so the half-width is 4.302653 / sqrt(3).
  mean, low, high = statistics.paired_interval([1.0, 2.0, 3.0])
  assert mean == 2.0 and np.isclose(high - mean, 4.302653 / np.sqrt(3), rtol=1e-6) and np.isclose(mean - low, high - mean)
  # n = 5 with t_{0.975, 4} = 2.776445.
  d = np.array([0.03, -0.01, 0.05, 0.02, 0.04])
  _, low, high = statistics.paired_interval(list(d))
  assert np.isclose(high - d.mean(), 2.776445 * d.std(ddof=1) / np.sqrt(5), rtol=1e-6)
  with pytest.raises(ValueError, match='at least 2'):
    statistics.paired_interval([0.1])


def test_comparison_table_gives_each_pairs_interval_over_its_shared_seeds():
  def row(run, seed, zeroshot, rsum=None):
    return {'run': run, 'seed': seed, 'synthetic/zeroshot_top1': zeroshot,
            **({'synthetic/rsum': rsum} if rsum is not None else {})}
  rows = [row('cosmos', 0, 0.5, 100.0), row('cosmos', 1, 0.7, 120.0), row('cosmos', 2, 0.6, 90.0),
          row('cosmos_no_distill', 0, 0.2, 80.0), row('cosmos_no_distill', 1, 0.3, 90.0),
          row('cosmos_no_distill', 2, 0.4), row('cosmos_no_distill', 3, 0.1),  # seed 3: no cosmos run
          row('saco', 0, 0.3)]
  lines = tables.comparison_table(rows, [('cosmos', 'cosmos_no_distill'), ('saco', 'clip')]).splitlines()
  cells = [c.strip() for c in lines[2].split('|')]
  assert cells[1] == '`cosmos` − `cosmos_no_distill` (0,1,2)'
  d = np.array([0.3, 0.4, 0.2])  # naive: mean ± t_{0.975, 2} * s / sqrt(3), t from statistical tables
  half = 4.302653 * d.std(ddof=1) / np.sqrt(3)
  assert cells[2] == f'{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}] (3/3)'
  assert cells[4] == '+25.0 [-38.5, +88.5] (2/2)'  # RSUM on the seeds that have it: 20, 30; t_{0.975, 1} = 12.706
  assert cells[3] == '-'  # a column no row has
  assert lines[3].split('|')[1].strip() == '`saco` − `clip` (no shared seeds)'
  assert tables.parse_pairs(['cosmos:clip']) == [('cosmos', 'clip')]
  with pytest.raises(ValueError, match="unknown run 'cosmo'"):
    tables.parse_pairs(['cosmo:clip'])
  with pytest.raises(ValueError, match='is not run:other'):
    tables.parse_pairs(['cosmos'])


def test_verdict_is_an_interval_read_only_with_every_held_out_seed():
  assert statistics.verdict([0.10, 0.11, 0.09, 0.12, 0.10], held_out=3, expected=3) == 'ahead'
  assert statistics.verdict([-0.10, -0.11, -0.09], held_out=3, expected=3) == 'behind'
  # Ahead on every seed, but too few and too spread for the interval to exclude zero: not a verdict of "ahead".
  assert statistics.verdict([0.01, 0.30], held_out=2, expected=2) == 'not distinguishable at this budget'
  assert statistics.verdict([0.1, -0.02, 0.05], held_out=3, expected=3) == 'not distinguishable at this budget'
  assert statistics.verdict([]) == 'not run'
  assert statistics.verdict([0.1, 0.2, 0.1, 0.2], held_out=1, expected=3) == 'pending (1 of 3 held-out seeds)'
  assert statistics.verdict([0.1]) == 'one seed: no interval'
  assert statistics.interval_cell([1.0, 2.0, 3.0], 'synthetic/zeroshot_top1') == '+2.000 [-0.484, +4.484]'
  assert statistics.interval_cell([0.1], 'synthetic/zeroshot_top1') == '-'


def test_headline_table_pairs_each_method_with_its_controls_on_its_papers_metrics():
  rows = []
  for seed in catalogue.DEV_SEEDS + catalogue.HELD_OUT_SEEDS:
    for run, r1, flops in (('clip_text_pool_augment_ema', 0.2, 1e13), ('clip_text_pool_compute', 0.25, 3e13),
                           ('clip_cosmos_compute', 0.3, 3e13), ('cosmos', 0.2 + 0.01 * (seed % 10 + 1), 3e13)):
      rows.append({'run': run, 'seed': seed, 'synthetic/mean_r1': r1 + (seed == 13) * 0.1 * (run != 'cosmos'),
                   'synthetic/zeroshot_top1': 0.5, 'synthetic_long/mean_r1': 0.1, 'train_flops': flops,
                   'wall_seconds': 100.0, 'jobs': 1, 'commit': 'abc1234'})
  lines = tables.headline_table(rows, ['clip_text_pool_augment_ema', 'clip_text_pool_compute', 'clip_cosmos_compute',
                                        'cosmos']).splitlines()
  # against the control, then against each compute-matched control
  assert len(lines) == 2 + 3 * len(catalogue.RUNS['cosmos'].metrics)
  first = [cell.strip() for cell in lines[2].split('|')[1:-1]]
  assert first[:3] == ['COSMOS (`cosmos`)', '`clip_text_pool_augment_ema`', 'mean R@1, short captions']
  assert first[5] == '+0.020 ± 0.010 (3/3)'  # seeds 0-2: +0.01, +0.02, +0.03
  # The held-out seeds alone: +0.02, +0.03 (11, 12), -0.06 (13): the interval holds zero. Pooled with the development
  # seeds' +0.01, +0.02, +0.03 it would be another interval (+0.008 [...]); the development seeds never enter it.
  held_out = [0.02, 0.03, -0.06]
  assert first[6] == statistics.interval_cell(held_out, 'synthetic/mean_r1') and first[6].startswith('-0.003 [')
  assert first[7] == '+0.020, +0.030, -0.060' and first[8] == '**not distinguishable at this budget**'
  assert first[9] == '30 / 10 (3.00x)' and first[11] == '`--methods=cosmos`'
  compute = [cell.strip() for cell in lines[2 + len(catalogue.RUNS['cosmos'].metrics)].split('|')[1:-1]]
  assert compute[1] == '`clip_text_pool_compute`' and compute[9].endswith('(1.00x)')
  plain = [cell.strip() for cell in lines[2 + 2 * len(catalogue.RUNS['cosmos'].metrics)].split('|')[1:-1]]
  assert plain[1] == '`clip_cosmos_compute`' and plain[5] == '-0.080 ± 0.010 (0/3)'
  zero_shot = [cell.strip() for cell in lines[3].split('|')[1:-1]]
  assert zero_shot[6] == '+0.000 [+0.000, +0.000]' and zero_shot[8] == 'not distinguishable at this budget'
  # A held-out seed missing: no verdict yet. Runs of two commits: none at all.
  partial = [r for r in rows if not (r['run'] == 'cosmos' and r['seed'] == 13)]
  control = 'clip_text_pool_augment_ema'
  assert tables.headline_table(partial, [control, 'cosmos']).splitlines()[2].split('|')[9].strip() == \
      '**pending (2 of 3 held-out seeds)**'
  mixed = [{**r, 'commit': 'def5678'} if r['seed'] == 0 and r['run'] == 'cosmos' else r for r in rows]
  assert tables.headline_table(mixed, [control, 'cosmos']).splitlines()[2].split('|')[9].strip() == \
      '**mixed commits (abc1234, def5678): rerun at one**'


def test_the_verdict_plot_draws_each_headline_pair_with_its_interval_and_seeds():
  key = catalogue.RUNS['slip'].metrics[0]
  rows = [{'run': run, 'seed': seed, key: value, 'commit': 'c'}
          for seed, (slip, clip) in {0: (0.30, 0.20), 1: (0.32, 0.20), 2: (0.28, 0.21), 11: (0.35, 0.22)}.items()
          for run, value in (('slip', slip), ('clip', clip))]
  entries = tables.verdict_entries(rows, ['clip', 'slip', 'clip_slip_compute'])
  (entry,) = entries  # slip − clip; clip_slip_compute has no runs, and clip has no METRICS
  assert (entry['method'], entry['control'], entry['metric']) == ('slip', 'clip', 'zero-shot top-1')
  np.testing.assert_allclose(entry['dev'], [0.10, 0.12, 0.07])
  np.testing.assert_allclose(entry['held_out'], [0.13])
  assert entry['interval'] is None  # one held-out seed: no interval (the development seeds never enter it)
  assert entry['verdict'] == 'pending (1 of 3 held-out seeds)'
  figure = tables.verdict_figure(entries + [{**entry, 'metric': 'RSUM', 'verdict': 'behind'}])
  assert len(figure.axes) == 2  # a panel per metric
  labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
  assert labels == ['slip − clip: pending (1 of 3 held-out seeds)']


def test_a_teachers_training_counts_as_its_methods_compute():
  rows = [{'run': run, 'seed': seed, **{key: 0.5 for key in catalogue.RUNS['saco_mimic'].metrics}, 'train_flops': flops}
          for run, seed, flops in (('saco_mimic', 11, 12e12), ('clip_mimic_compute', 11, 22e12),
                                   ('clip_teacher', 11 + catalogue.TEACHER_SEED_OFFSET, 10e12))]
  line = tables.headline_table(rows, ['clip_mimic_compute', 'saco_mimic']).splitlines()[-4]
  assert [cell.strip() for cell in line.split('|')[1:-1]][9] == '22 / 22 (1.00x)'
  without_teacher = tables.headline_table(rows[:2], ['clip_mimic_compute', 'saco_mimic']).splitlines()[-4]
  assert [cell.strip() for cell in without_teacher.split('|')[1:-1]][9] == '- / 22'


def test_the_verdict_reads_the_held_out_seeds_alone():
  # Pooled over all six seeds these differences read 'ahead'; the held-out three alone hold zero.
  key = catalogue.RUNS['slip'].metrics[0]
  differences = {0: 0.10, 1: 0.11, 2: 0.12, 11: 0.10, 12: -0.05, 13: 0.12}
  rows = [{'run': run, 'seed': seed, **dict.fromkeys(catalogue.RUNS['slip'].metrics, 0.5), key: value, 'commit': 'c'}
          for seed, d in differences.items() for run, value in (('slip', 0.3 + d), ('clip', 0.3))]
  assert statistics.verdict(list(differences.values()), held_out=3, expected=3) == 'ahead'
  (entry,) = tables.verdict_entries(rows, ['clip', 'slip'])
  np.testing.assert_allclose(entry['interval'], statistics.paired_interval([0.10, -0.05, 0.12]), atol=1e-12)
  assert entry['verdict'] == 'not distinguishable at this budget'
  line = tables.headline_table(rows, ['clip', 'slip']).splitlines()[2]
  cells = [cell.strip() for cell in line.split('|')[1:-1]]
  assert cells[6] == statistics.interval_cell([0.10, -0.05, 0.12], key)
  assert cells[8] == '**not distinguishable at this budget**'


def test_the_change_between_budgets_is_paired_seed_by_seed():
  metrics = catalogue.RUNS['slip'].metrics
  at_one = {11: 0.01, 12: 0.02, 13: 0.00}
  at_four = {11: 0.11, 12: 0.12, 13: 0.13}
  def rows(differences):
    return [{'run': run, 'seed': seed, **dict.fromkeys(metrics, 0.5), metrics[0]: 0.3 + d * (run == 'slip')}
            for seed, d in differences.items() for run in ('slip', 'clip')]
  lines = tables.budget_change_table(rows(at_one), rows(at_four), [('slip', 'clip')], 4).splitlines()
  cells = [cell.strip() for cell in lines[2].split('|')[1:-1]]
  assert cells[0] == '`slip` − `clip`, zero-shot top-1'
  assert cells[1] == statistics.interval_cell(list(at_one.values()), metrics[0])  # holds zero: not bold
  mean, low, high = statistics.paired_interval([at_four[s] - at_one[s] for s in (11, 12, 13)])
  assert cells[3] == f'**{mean:+.3f}** [{low:+.3f}, {high:+.3f}]' and low > 0
  assert [cell.strip() for cell in lines[3].split('|')[1:-1]][3] == '+0.000 [+0.000, +0.000]'  # the second metric
