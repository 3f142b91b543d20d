"""benchmarks/methods.py: runs are config files, which runs a request expands to, their command lines, and the mean
+- std table."""
import ast
import concurrent.futures
import json
import os
import subprocess

from absl import flags
from ml_collections import config_flags
import numpy as np
import pytest

from benchmarks import batch_duplicates as dup
from benchmarks import methods
from vlp_jax.config import from_file, validate

ROOT = methods.ROOT


def test_expand_puts_dependencies_first_and_rejects_unknown_names():
  assert methods.expand(['saco_continue']) == ['clip', 'clip_continue', 'saco_continue']  # its start and its control
  # its teacher trains with another seed, not as a row
  assert methods.expand(['saco_mimic', 'clip']) == ['clip', 'clip_mimic_compute', 'saco_mimic']
  # its control, then each of its compute-matched controls (COMPUTE_CONTROL may name several)
  assert methods.expand(['cosmos']) == ['clip', 'clip_text_pool_augment_ema', 'clip_text_pool_compute',
                                        'clip_cosmos_compute', 'cosmos']
  table = methods.expand(['table'])
  assert table.index('clip') < table.index('saco_continue') and len(table) == len(set(table))
  with pytest.raises(ValueError, match='valid runs'):
    methods.expand(['nope'])


def test_a_run_name_is_its_config_file():
  assert methods.RUNS['clip'].config == 'configs/clip_shapes.py'
  assert methods.RUNS['clip_continue'].config == 'configs/clip_continue_shapes.py'
  assert methods.RUNS['saco_mimic'].config == 'configs/experiments/saco_mimic.py'
  configs = os.path.join(ROOT, 'configs')
  files = {f'configs/{n}' for n in os.listdir(configs) if n.endswith('_shapes.py')} | {
      f'configs/experiments/{n}' for n in os.listdir(os.path.join(configs, 'experiments')) if n.endswith('.py')}
  assert {run.config for run in methods.RUNS.values()} == files  # every such file is a run, and only they
  for name, run in methods.RUNS.items():
    assert methods.config_path(name) == run.config and os.path.exists(os.path.join(ROOT, run.config))


def _flag_config(argv):
  """The config the `--config` flag of vlp_jax.main parses `argv` (its arguments after the module) to."""
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, '', flag_values=flag_values, lock_config=False,
                                  accept_new_attributes=True, sys_argv=['main', *argv])  # as define_config_flag
  flags.DEFINE_string('workdir', None, '', flag_values=flag_values)
  flag_values(['main', *argv])
  return flag_values.config


@pytest.mark.parametrize('steps,eval_every', [(None, 0), (800, 100)])
def test_every_run_trains_its_file_with_only_the_runner_flags_and_validates(monkeypatch, steps, eval_every):
  """What each subprocess trains: its command line, parsed as vlp_jax.main parses it, is the file's config with the
  runner's own flags (seed, eval interval, --steps, the checkpoints of AFTER and TEACHER), and it validates."""
  monkeypatch.chdir(ROOT)  # the runner starts its subprocesses here; --config is relative to it
  for name, run in methods.RUNS.items():
    cmd = methods.command('/w', name, 3, steps, eval_every)
    assert cmd[1:3] == ['-m', 'vlp_jax.main'] and cmd[3] == f'--config={run.config}'
    config = methods.run_config('/w', name, 3, steps, eval_every)
    assert _flag_config(cmd[3:]).to_json() == config.to_json(), name
    assert config.seed == 3 and config.eval.every_steps == (eval_every or methods.NEVER)
    if run.after:
      assert config.init.checkpoint == f'/w/{run.after}/seed3'
    elif steps:
      assert config.total_steps == steps
    validate(config)


def test_runs_are_compared_only_with_clips_and_controls_of_the_same_data_and_budget():
  """Every name a run file or a group gives is a run; a run's BASELINE is a CLIP, and its BASELINE and CONTROL train
  on the same embedded data as it, for as many steps when they start the same way (both from scratch, or both from
  the same AFTER run), except a compute-matched control, whose budget is its method's FLOPs."""
  configs = {name: from_file(os.path.join(ROOT, run.config)) for name, run in methods.RUNS.items()}
  compute_matched = {c for run in methods.RUNS.values() for c in run.compute_controls}  # their budget is the FLOPs'
  for name, run in methods.RUNS.items():
    for other in (run.baseline, run.control, run.after, run.teacher):
      assert other is None or other in methods.RUNS, (name, other)
    baseline = configs[run.baseline]
    assert baseline.objective.name == 'clip' and not baseline.objective.terms, (name, run.baseline)
    for other in {run.baseline, run.control} - {None}:
      mine, theirs = configs[name].data.synthetic.to_dict(), configs[other].data.synthetic.to_dict()
      if not configs[other].objective.get('decoder_weight'):  # only a decoder reads regions, shuffled or not
        mine.pop('shuffle_regions'), theirs.pop('shuffle_regions')
      assert mine == theirs, (name, other)
      if methods.RUNS[other].after == run.after and name not in compute_matched:
        assert configs[other].total_steps == configs[name].total_steps, (name, other)
  for group, names in methods.GROUPS.items():
    assert names and set(names) <= set(methods.RUNS), (group, set(names) - set(methods.RUNS))
  assert not set(methods.GROUPS) & set(methods.RUNS)  # a name means one thing to --methods
  assert methods.expand(['all']) and set(methods.expand(['all'])) == set(methods.RUNS)


def test_every_experiment_file_says_what_it_is_in_a_short_docstring():
  for name, run in methods.RUNS.items():
    if run.config.startswith('configs/experiments/'):
      with open(os.path.join(ROOT, run.config)) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
      assert doc and 2 <= len(doc.splitlines()) <= 5, name


def _flat(tree: dict, prefix: str = '') -> dict:
  return {k: v for key, value in tree.items()
          for k, v in (_flat(value, f'{prefix}{key}.') if isinstance(value, dict)
                       else {f'{prefix}{key}': value}).items()}


def test_cosmos_baseline_and_saco_mimic_alone_change_only_their_keys():
  """COSMOS's baseline is its text-pool CLIP with the augmentation and the EMA, and nothing else; the mimic alone is
  saco_mimic with SaCo's term weighed 0, and Algorithm 1 saco_mimic with a constant alpha, and nothing else."""
  flat = lambda name: _flat(from_file(os.path.join(ROOT, methods.RUNS[name].config)).to_dict())  # noqa: E731
  diff = lambda a, b: {k: (flat(a).get(k), flat(b).get(k)) for k in flat(a) | flat(b)  # noqa: E731
                       if flat(a).get(k) != flat(b).get(k)}
  assert diff('clip_text_pool', 'clip_text_pool_augment_ema') == {'data.augment': ('none', 'dino'),
                                                                  'ema.decay': (0.0, 0.99)}
  assert diff('saco_mimic', 'saco_mimic_only') == {'objective.saco.alpha': (5.0, 0.0)}
  assert diff('saco_mimic', 'saco_constant') == {'objective.saco.ramp': ('linear', 'constant')}
  assert diff('clip', 'clip_cosmos_compute') == {'total_steps': (400, 1355)}
  assert methods.RUNS['cosmos'].control == 'clip_text_pool_augment_ema'


def test_discover_rejects_a_run_without_a_label_an_unknown_name_and_a_name_in_two_places(tmp_path):
  experiments = tmp_path / 'configs' / 'experiments'
  experiments.mkdir(parents=True)
  (tmp_path / 'configs' / 'clip_shapes.py').write_text("LABEL = 'CLIP'\n")
  (experiments / 'wide.py').write_text("LABEL = 'Wide'\nCONTROL = 'clip'\nWIDTH = 2 * 64\n")
  runs = methods.discover(str(tmp_path))
  assert runs['wide'] == methods.Run('configs/experiments/wide.py', 'Wide', control='clip')
  assert runs['clip'].config == 'configs/clip_shapes.py' and runs['clip'].baseline == 'clip'
  (experiments / 'wide.py').write_text("LABEL = 'Wide'\nCONTROL = 'clip_wide'\n")
  with pytest.raises(ValueError, match="CONTROL names 'clip_wide', which is not a run"):
    methods.discover(str(tmp_path))
  # COMPUTE_CONTROL: one run or a tuple of runs, each of which must exist
  (experiments / 'wide.py').write_text("LABEL = 'Wide'\nCOMPUTE_CONTROL = 'clip'\n")
  assert methods.discover(str(tmp_path))['wide'].compute_controls == ('clip',)
  (experiments / 'wide.py').write_text("LABEL = 'Wide'\nCOMPUTE_CONTROL = ('clip', 'clip_long')\n")
  with pytest.raises(ValueError, match="COMPUTE_CONTROL names 'clip_long', which is not a run"):
    methods.discover(str(tmp_path))
  (experiments / 'clip_long.py').write_text("LABEL = 'CLIP, longer'\n")
  assert methods.discover(str(tmp_path))['wide'].compute_controls == ('clip', 'clip_long')
  (experiments / 'clip_long.py').unlink()
  (experiments / 'wide.py').write_text("LABEL = 'Wide'\nCOMPUTE_CONTROL = 3\n")
  with pytest.raises(ValueError, match='COMPUTE_CONTROL must be a run name or a tuple of them'):
    methods.discover(str(tmp_path))
  (experiments / 'wide.py').write_text("LABEL = 'Wide ' + 'net'\n")
  with pytest.raises(ValueError, match='LABEL must be a literal'):
    methods.discover(str(tmp_path))
  (experiments / 'wide.py').write_text("AFTER = 'clip'\n")
  with pytest.raises(ValueError, match='no LABEL'):
    methods.discover(str(tmp_path))
  (experiments / 'wide.py').unlink()
  (experiments / 'clip.py').write_text("LABEL = 'CLIP again'\n")
  with pytest.raises(ValueError, match=r"\['clip'\] are both"):
    methods.discover(str(tmp_path))


def test_commands_chain_continue_runs_and_teachers():
  cmd = methods.command('/w', 'saco_continue', 3, steps=800)
  assert '--config=configs/saco_continue_shapes.py' in cmd and '--config.seed=3' in cmd
  assert '--config.init.checkpoint=/w/clip/seed3' in cmd
  assert not any(a.startswith('--config.total_steps') for a in cmd)  # a continue phase keeps its budget
  assert '--config.total_steps=800' in methods.command('/w', 'clip', 3, steps=800)
  # the table reads the final eval only: no run evaluates on the way unless asked
  assert f'--config.eval.every_steps={methods.NEVER}' in cmd
  assert methods.command('/w', 'clip', 3, steps=None, eval_every=100)[-1] == '--config.eval.every_steps=100'
  mimic = methods.command('/w', 'saco_mimic', 3, steps=None)
  assert f'--config.objective.saco.teacher_checkpoint=/w/clip_teacher/seed{3 + methods.TEACHER_SEED_OFFSET}' in mimic


def test_runs_share_a_compilation_cache_under_the_workdir_unless_one_is_set(monkeypatch):
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  assert methods.run_env('/w')['JAX_COMPILATION_CACHE_DIR'] == '/w/jax_cache'
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '/mine')
  assert methods.run_env('/w')['JAX_COMPILATION_CACHE_DIR'] == '/mine'


def test_final_metrics_and_the_table(tmp_path):
  rows = []
  for seed, (zeroshot, i2t, t2i) in enumerate([(0.2, 0.1, 0.3), (0.4, 0.3, 0.5)]):
    workdir = tmp_path / f'seed{seed}'
    workdir.mkdir()
    with open(workdir / 'metrics.jsonl', 'w') as f:
      f.write(json.dumps({'step': 100, 'eval/synthetic/zeroshot_top1': 0.01, 'perf/samples_per_sec': 100.0}) + '\n')
      per_source = {f'eval/{name}/{d}_r1': (k + 1) / 10 + (d == 't2i') / 20
                    for k, name in enumerate(methods.SOURCE_SETS) for d in ('i2t', 't2i')}
      per_source.update({f'eval/synthetic_studio/{d}_r{n}': 0.0 for d in ('i2t', 't2i') for n in (5, 10)})
      f.write(json.dumps({'step': 200, 'eval/synthetic/zeroshot_top1': zeroshot, 'eval/synthetic/i2t_r1': i2t,
                          'eval/synthetic/t2i_r1': t2i, 'perf/samples_per_sec': 300.0, **per_source}) + '\n')
    metrics = methods.final_metrics(str(workdir))
    assert metrics['within_source/mean_r1'] == pytest.approx((0.125 + 0.225 + 0.325) / 3)
    assert 'synthetic/rsum' not in metrics  # only R@1 logged: no RSUM
    assert metrics['synthetic_studio/rsum'] == pytest.approx(100 * (0.1 + 0.15))
    assert metrics['synthetic/zeroshot_top1'] == zeroshot  # the last eval, not the first
    assert metrics['synthetic/mean_r1'] == pytest.approx((i2t + t2i) / 2)
    assert metrics['samples_per_sec'] == 200.0
    rows.append({'run': 'clip', 'seed': seed, **metrics, 'wall_seconds': 10.0, 'jobs': 1})
  line = methods.table(rows, ['clip'], {}).splitlines()[2]
  assert '0.300 ± 0.141' in line  # zero-shot mean and sample std of 0.2 and 0.4
  assert '0.300 ± 0.141' in line.split('|')[3]  # mean R@1: 0.2 and 0.4
  assert 'seeds 0,1' in line and '1.00x' in line
  # Speeds only from runs trained alone: with both runs of a shared CPU, no step time.
  shared = methods.table([{**r, 'jobs': 2} for r in rows], ['clip'], {}).splitlines()[2]
  assert shared.split('|')[-2].strip() == '-' and shared.split('|')[-3].strip() == '-'


def test_paired_table_subtracts_the_controls_of_the_same_seed():
  def row(run, seed, zeroshot):
    return {'run': run, 'seed': seed, 'synthetic/zeroshot_top1': zeroshot}
  rows = [row('clip', 0, 0.2), row('clip', 1, 0.4), row('clip_text_pool_augment_ema', 0, 0.1),
          row('clip_text_pool_augment_ema', 1, 0.3),
          row('clip_text_pool_compute', 1, 0.35), row('cosmos', 0, 0.15), row('cosmos', 1, 0.5),
          row('cosmos', 2, 0.9)]  # seed 2 has no control: left out
  lines = methods.paired_table(
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
  mean, low, high = methods.paired_interval([1.0, 2.0, 3.0])
  assert mean == 2.0 and np.isclose(high - mean, 4.302653 / np.sqrt(3), rtol=1e-6) and np.isclose(mean - low, high - mean)
  # n = 5 with t_{0.975, 4} = 2.776445.
  d = np.array([0.03, -0.01, 0.05, 0.02, 0.04])
  _, low, high = methods.paired_interval(list(d))
  assert np.isclose(high - d.mean(), 2.776445 * d.std(ddof=1) / np.sqrt(5), rtol=1e-6)
  with pytest.raises(ValueError, match='at least 2'):
    methods.paired_interval([0.1])


def test_comparison_table_gives_each_pairs_interval_over_its_shared_seeds():
  def row(run, seed, zeroshot, rsum=None):
    return {'run': run, 'seed': seed, 'synthetic/zeroshot_top1': zeroshot,
            **({'synthetic/rsum': rsum} if rsum is not None else {})}
  rows = [row('cosmos', 0, 0.5, 100.0), row('cosmos', 1, 0.7, 120.0), row('cosmos', 2, 0.6, 90.0),
          row('cosmos_no_distill', 0, 0.2, 80.0), row('cosmos_no_distill', 1, 0.3, 90.0),
          row('cosmos_no_distill', 2, 0.4), row('cosmos_no_distill', 3, 0.1),  # seed 3: no cosmos run
          row('saco', 0, 0.3)]
  lines = methods.comparison_table(rows, [('cosmos', 'cosmos_no_distill'), ('saco', 'clip')]).splitlines()
  cells = [c.strip() for c in lines[2].split('|')]
  assert cells[1] == '`cosmos` − `cosmos_no_distill` (0,1,2)'
  d = np.array([0.3, 0.4, 0.2])  # naive: mean ± t_{0.975, 2} * s / sqrt(3), t from statistical tables
  half = 4.302653 * d.std(ddof=1) / np.sqrt(3)
  assert cells[2] == f'{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}] (3/3)'
  assert cells[4] == '+25.0 [-38.5, +88.5] (2/2)'  # RSUM on the seeds that have it: 20, 30; t_{0.975, 1} = 12.706
  assert cells[3] == '-'  # a column no row has
  assert lines[3].split('|')[1].strip() == '`saco` − `clip` (no shared seeds)'
  assert methods.parse_pairs(['cosmos:clip']) == [('cosmos', 'clip')]
  with pytest.raises(ValueError, match="unknown run 'cosmo'"):
    methods.parse_pairs(['cosmo:clip'])
  with pytest.raises(ValueError, match='is not run:other'):
    methods.parse_pairs(['cosmos'])


def test_verdict_is_an_interval_read_only_with_every_held_out_seed():
  assert methods.verdict([0.10, 0.11, 0.09, 0.12, 0.10], held_out=3, expected=3) == 'ahead'
  assert methods.verdict([-0.10, -0.11, -0.09], held_out=3, expected=3) == 'behind'
  # Ahead on every seed, but too few and too spread for the interval to exclude zero: not a verdict of "ahead".
  assert methods.verdict([0.01, 0.30], held_out=2, expected=2) == 'not distinguishable at this budget'
  assert methods.verdict([0.1, -0.02, 0.05], held_out=3, expected=3) == 'not distinguishable at this budget'
  assert methods.verdict([]) == 'not run'
  assert methods.verdict([0.1, 0.2, 0.1, 0.2], held_out=1, expected=3) == 'pending (1 of 3 held-out seeds)'
  assert methods.verdict([0.1]) == 'one seed: no interval'
  assert methods.interval_cell([1.0, 2.0, 3.0], 'synthetic/zeroshot_top1') == '+2.000 [-0.484, +4.484]'
  assert methods.interval_cell([0.1], 'synthetic/zeroshot_top1') == '-'


def test_headline_table_pairs_each_method_with_its_controls_on_its_papers_metrics():
  rows = []
  for seed in methods.DEV_SEEDS + methods.HELD_OUT_SEEDS:
    for run, r1, flops in (('clip_text_pool_augment_ema', 0.2, 1e13), ('clip_text_pool_compute', 0.25, 3e13),
                           ('clip_cosmos_compute', 0.3, 3e13), ('cosmos', 0.2 + 0.01 * (seed % 10 + 1), 3e13)):
      rows.append({'run': run, 'seed': seed, 'synthetic/mean_r1': r1 + (seed == 13) * 0.1 * (run != 'cosmos'),
                   'synthetic/zeroshot_top1': 0.5, 'synthetic_long/mean_r1': 0.1, 'train_flops': flops,
                   'wall_seconds': 100.0, 'jobs': 1, 'commit': 'abc1234'})
  lines = methods.headline_table(rows, ['clip_text_pool_augment_ema', 'clip_text_pool_compute', 'clip_cosmos_compute',
                                        'cosmos']).splitlines()
  # against the control, then against each compute-matched control
  assert len(lines) == 2 + 3 * len(methods.RUNS['cosmos'].metrics)
  first = [cell.strip() for cell in lines[2].split('|')[1:-1]]
  assert first[:3] == ['COSMOS (`cosmos`)', '`clip_text_pool_augment_ema`', 'mean R@1, short captions']
  assert first[5] == '+0.020 ± 0.010 (3/3)'  # seeds 0-2: +0.01, +0.02, +0.03
  # Every seed: +0.01, +0.02, +0.03 (0-2), +0.02, +0.03 (11, 12), -0.06 (13): the interval holds zero.
  every = [0.01, 0.02, 0.03, 0.02, 0.03, -0.06]
  assert first[6] == methods.interval_cell(every, 'synthetic/mean_r1') and first[6].startswith('+0.008 [')
  assert first[7] == '+0.020, +0.030, -0.060' and first[8] == '**not distinguishable at this budget**'
  assert first[9] == '30 / 10 (3.00x)' and first[11] == '`--methods=cosmos`'
  compute = [cell.strip() for cell in lines[2 + len(methods.RUNS['cosmos'].metrics)].split('|')[1:-1]]
  assert compute[1] == '`clip_text_pool_compute`' and compute[9].endswith('(1.00x)')
  plain = [cell.strip() for cell in lines[2 + 2 * len(methods.RUNS['cosmos'].metrics)].split('|')[1:-1]]
  assert plain[1] == '`clip_cosmos_compute`' and plain[5] == '-0.080 ± 0.010 (0/3)'
  zero_shot = [cell.strip() for cell in lines[3].split('|')[1:-1]]
  assert zero_shot[6] == '+0.000 [+0.000, +0.000]' and zero_shot[8] == 'not distinguishable at this budget'
  # A held-out seed missing: no verdict yet. Runs of two commits: none at all.
  partial = [r for r in rows if not (r['run'] == 'cosmos' and r['seed'] == 13)]
  control = 'clip_text_pool_augment_ema'
  assert methods.headline_table(partial, [control, 'cosmos']).splitlines()[2].split('|')[9].strip() == \
      '**pending (2 of 3 held-out seeds)**'
  mixed = [{**r, 'commit': 'def5678'} if r['seed'] == 0 and r['run'] == 'cosmos' else r for r in rows]
  assert methods.headline_table(mixed, [control, 'cosmos']).splitlines()[2].split('|')[9].strip() == \
      '**mixed commits (abc1234, def5678): rerun at one**'


def test_a_row_that_only_evaluated_a_finished_workdir_is_refused(tmp_path, monkeypatch):
  """A workdir that already holds the final checkpoint (trained by other code) gives an evaluation-only row, which
  the tables leave out; a workdir with an earlier checkpoint resumes a real run."""
  monkeypatch.setattr(methods.subprocess, 'run', lambda *a, **k: subprocess.CompletedProcess(a, 0, '', ''))
  monkeypatch.setattr(methods, 'final_metrics', lambda workdir: {'synthetic/zeroshot_top1': 0.5})
  total = methods.run_config(str(tmp_path), 'clip', 0, None).total_steps
  (tmp_path / 'clip' / 'seed0' / 'checkpoints' / str(total)).mkdir(parents=True)
  (tmp_path / 'clip' / 'seed1' / 'checkpoints' / str(total // 2)).mkdir(parents=True)
  finished = methods.train(str(tmp_path), 'clip', 0, None)
  resumed = methods.train(str(tmp_path), 'clip', 1, None)
  assert finished['evaluation_only'] and finished['resumed']
  assert resumed['resumed'] and 'evaluation_only' not in resumed
  assert resumed['machine'] == methods.machine_name() and methods.machine_name().startswith(f'{os.cpu_count()}-core ')
  kept, refused = methods.tabulated([finished, resumed])
  assert kept == [resumed] and len(refused) == 1 and 'clip seed 0: evaluation only' in refused[0]
  assert methods.latest_checkpoint_step(str(tmp_path / 'clip' / 'seed1')) == total // 2


def test_the_verdict_plot_draws_each_headline_pair_with_its_interval_and_seeds():
  key = methods.RUNS['slip'].metrics[0]
  rows = [{'run': run, 'seed': seed, key: value, 'commit': 'c'}
          for seed, (slip, clip) in {0: (0.30, 0.20), 1: (0.32, 0.20), 2: (0.28, 0.21), 11: (0.35, 0.22)}.items()
          for run, value in (('slip', slip), ('clip', clip))]
  entries = methods.verdict_entries(rows, ['clip', 'slip', 'clip_slip_compute'])
  (entry,) = entries  # slip − clip; clip_slip_compute has no runs, and clip has no METRICS
  assert (entry['method'], entry['control'], entry['metric']) == ('slip', 'clip', 'zero-shot top-1')
  np.testing.assert_allclose(entry['dev'], [0.10, 0.12, 0.07])
  np.testing.assert_allclose(entry['held_out'], [0.13])
  np.testing.assert_allclose(entry['interval'], methods.paired_interval([0.10, 0.12, 0.07, 0.13]))
  assert entry['verdict'] == 'pending (1 of 3 held-out seeds)'
  figure = methods.verdict_figure(entries + [{**entry, 'metric': 'RSUM', 'verdict': 'behind'}])
  assert len(figure.axes) == 2  # a panel per metric
  labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
  assert labels == ['slip − clip: pending (1 of 3 held-out seeds)']


def test_a_teachers_training_counts_as_its_methods_compute():
  rows = [{'run': run, 'seed': seed, **{key: 0.5 for key in methods.RUNS['saco_mimic'].metrics}, 'train_flops': flops}
          for run, seed, flops in (('saco_mimic', 11, 12e12), ('clip_mimic_compute', 11, 22e12),
                                   ('clip_teacher', 11 + methods.TEACHER_SEED_OFFSET, 10e12))]
  line = methods.headline_table(rows, ['clip_mimic_compute', 'saco_mimic']).splitlines()[-4]
  assert [cell.strip() for cell in line.split('|')[1:-1]][9] == '22 / 22 (1.00x)'
  without_teacher = methods.headline_table(rows[:2], ['clip_mimic_compute', 'saco_mimic']).splitlines()[-4]
  assert [cell.strip() for cell in without_teacher.split('|')[1:-1]][9] == '- / 22'


def test_a_stored_run_is_not_trained_again(tmp_path, monkeypatch):
  row = {'run': 'clip', 'seed': 7, 'synthetic/zeroshot_top1': 0.5}
  methods.write_row(str(tmp_path / 'store'), row)
  monkeypatch.setattr(methods.subprocess, 'run', lambda *a, **k: pytest.fail('a stored run was trained again'))
  assert methods.train(str(tmp_path / 'w'), 'clip', 7, None, store=str(tmp_path / 'store')) == row
  assert methods.stored_row(str(tmp_path / 'store'), 'clip', 8) is None


def test_metrics_must_name_columns(tmp_path):
  experiments = tmp_path / 'configs' / 'experiments'
  experiments.mkdir(parents=True)
  (tmp_path / 'configs' / 'clip_shapes.py').write_text("LABEL = 'CLIP'\n")
  (experiments / 'x.py').write_text("LABEL = 'X'\nMETRICS = ('synthetic/zeroshot_top1',)\n")
  assert methods.discover(str(tmp_path))['x'].metrics == ('synthetic/zeroshot_top1',)
  (experiments / 'x.py').write_text("LABEL = 'X'\nMETRICS = ('synthetic/top1',)\n")
  with pytest.raises(ValueError, match="unknown: \\['synthetic/top1'\\]"):
    methods.discover(str(tmp_path))


def test_compute_matched_controls_train_for_the_flops_their_method_was_measured_at():
  """Each compute-matched control's budget is its method's training FLOPs (plus its TEACHER's training), as XLA
  counted them in the stored runs, over the FLOPs of one of its own steps (to a step)."""
  load = lambda name: from_file(os.path.join(ROOT, methods.RUNS[name].config))  # noqa: E731

  def flops(name: str) -> float | None:
    """A stored run's training FLOPs (any seed: they do not depend on it)."""
    seeds = [*range(6), *range(methods.TEACHER_SEED_OFFSET, methods.TEACHER_SEED_OFFSET + 6)]
    rows = [r for r in (methods.stored_row(methods.STORE, name, s) for s in seeds) if r]
    return rows[0]['train_flops'] if rows else None

  checked = 0
  for name, run in methods.RUNS.items():
    for control in run.compute_controls:
      if flops(name) is None or flops(control) is None:
        continue
      spent = flops(name) + (flops('clip_teacher') if run.teacher else 0.0)
      step = flops(control) / load(control).total_steps
      assert load(control).total_steps == round(spent / step), (name, control, spent / step)
      checked += 1
  assert checked >= 2  # SLIP and COSMOS are stored; SaCo's mimic once it is


def test_batch_duplicates_counts_rows_that_share_a_caption():
  assert dup.duplicated_fraction(['a', 'b', 'a', 'c']) == 0.5
  assert dup.duplicated_fraction(['a', 'b']) == 0.0
  pools = {'a': [f'a {i}' for i in range(100)], 'b': [f'b {i}' for i in range(100)],
           'templated': [f'template {i % 3}' for i in range(100)]}  # 3 captions, about 33 copies each
  result = dup.batch_duplicates(pools, batch_size=10, batches=400, seed=0)
  assert result['per_source']['a'] == result['per_source']['b'] == 0.0 and result['per_source']['templated'] > 0.9
  # a third of single-source batches are templated (about 1/3 x 0.97); a mixed batch holds ~3 templated rows
  assert 0.25 < result['single_source'] < 0.42 and result['mixed'] < result['single_source'] - 0.05


def test_a_resumed_runs_wall_time_is_left_out_and_a_checkpoint_is_found(tmp_path):
  rows = [{'wall_seconds': 100.0, 'jobs': 1}, {'wall_seconds': 900.0, 'jobs': 1}, {'wall_seconds': 120.0, 'jobs': 1},
          {'wall_seconds': 20.0, 'jobs': 1, 'resumed': True}, {'wall_seconds': 500.0, 'jobs': 2}]
  assert methods._mean_of(rows, 'wall_seconds') == 120.0  # the median; resumed: half a run; jobs 2: a shared CPU
  assert methods._mean_of(rows, 'jobs') == 1.2
  # wall times compare within one machine: the one most rows ran on
  elsewhere = [{**r, 'machine': 'a'} for r in rows] + [{'wall_seconds': 40.0, 'jobs': 1, 'machine': 'b'}]
  assert methods.timing_machine(elsewhere) == 'a' and methods.timing_machine(rows) is None
  assert methods._mean_of(elsewhere, 'wall_seconds', 'a') == 120.0
  assert methods._mean_of(elsewhere, 'wall_seconds', 'b') == 40.0
  assert not methods.has_checkpoint(str(tmp_path))
  (tmp_path / 'checkpoints' / 'tmp-1').mkdir(parents=True)
  assert not methods.has_checkpoint(str(tmp_path))  # a save that never finished
  (tmp_path / 'checkpoints' / '400').mkdir()
  assert methods.has_checkpoint(str(tmp_path))


def test_time_left_comes_from_each_runs_median_wall_over_runs_trained_from_the_start():
  rows = [{'run': 'clip', 'wall_seconds': w} for w in (80, 90, 400)] + [
      {'run': 'cosmos', 'wall_seconds': 300}, {'run': 'cosmos', 'wall_seconds': 5, 'resumed': True},
      {'run': 'slip', 'wall_seconds': 2, 'evaluation_only': True}]
  # clip's median 90, cosmos's 300 (the resumed run is left out), slip has none: the median of all four, 195
  assert methods.remaining_seconds(['clip', 'clip', 'cosmos', 'slip'], rows) == 90 + 90 + 300 + 195
  assert methods.remaining_seconds(['clip', 'cosmos'], rows, jobs=2) == (90 + 300) / 2
  assert methods.remaining_seconds(['clip'], [{'run': 'clip', 'wall_seconds': 3, 'resumed': True}]) is None
  row = {'run': 'saco', 'seed': 11, 'wall_seconds': 81.4, 'synthetic/zeroshot_top1': 0.2634}
  line = methods.progress_line(row, 3, 52, 2.0 * 3600)
  assert line == '[3/52] saco seed 11: 81 s, zero-shot top-1 0.263; about 2.0 h left'
  assert methods.progress_line(row, 3, 52, 600).endswith('; about 10 min left')
  assert methods.progress_line({**row, 'run': 'clip'}, 52, 52, None) == '[52/52] clip seed 11: 81 s'  # no METRICS


def test_progress_reports_each_run_it_trains_with_the_time_the_rest_should_take(tmp_path, capsys):
  planned = methods.planned_runs(['saco_mimic'], [0, 1])
  assert planned == [('clip_teacher', 1000), ('saco_mimic', 0), ('clip_teacher', 1001), ('saco_mimic', 1)]
  store = str(tmp_path)
  methods.write_row(store, {'run': 'clip_teacher', 'seed': 1000, 'wall_seconds': 80.0})
  progress = methods.Progress(planned, store)
  assert progress.first_line() == '1 of 4 runs stored; 3 to train, 1 at a time.'
  stored = methods.stored_row(store, 'clip_teacher', 1000)
  assert progress.reported(stored) is stored and capsys.readouterr().out == ''  # a stored run is not reported
  progress.reported({'run': 'saco_mimic', 'seed': 0, 'wall_seconds': 200.0, 'synthetic/zeroshot_top1': 0.25})
  # left: the teacher of seed 1 (the teacher's median, 80 s) and saco_mimic seed 1 (200 s)
  assert capsys.readouterr().out == '[1/3] saco_mimic seed 0: 200 s, zero-shot top-1 0.250; about 5 min left\n'


def test_a_stored_run_needs_no_checkpoint_of_its_start_or_teacher(tmp_path, monkeypatch):
  """A stored row is the run's result: its AFTER and TEACHER are not trained again for their checkpoints."""
  store = str(tmp_path / 'store')
  row = {'run': 'saco_mimic', 'seed': 7, 'synthetic/zeroshot_top1': 0.5}
  methods.write_row(store, row)
  monkeypatch.setattr(methods.subprocess, 'run', lambda *a, **k: pytest.fail('a prerequisite was trained again'))
  done = concurrent.futures.Future()
  done.set_result({'run': 'clip_teacher'})
  futures = {('clip_teacher', 1007): done}
  assert methods.train_with_prerequisites(str(tmp_path / 'w'), 'saco_mimic', 7, futures, None, store=store) == row
  # not stored: its teacher's checkpoint is missing, so the teacher is trained again before it
  trained = []
  monkeypatch.setattr(methods, 'train', lambda root, name, seed, *a, **k: trained.append((name, seed)) or {})
  methods.train_with_prerequisites(str(tmp_path / 'w'), 'saco_mimic', 8, {('clip_teacher', 1008): done}, None,
                                   store=store)
  assert trained == [('clip_teacher', 1008), ('saco_mimic', 8)]


def test_update_results_replaces_only_the_marked_block(tmp_path):
  path = tmp_path / 'RESULTS.md'
  path.write_text(f'# Results\nbefore\n{methods.RESULTS_BEGIN}\nold table\n{methods.RESULTS_END}\nafter\n')
  methods.update_results(str(path), '| new | table |\n')
  assert path.read_text() == (f'# Results\nbefore\n{methods.RESULTS_BEGIN}\n\n| new | table |\n\n'
                              f'{methods.RESULTS_END}\nafter\n')
  methods.update_results(str(path), 'again')  # idempotent in form: the markers stay
  assert 'again' in path.read_text() and 'new' not in path.read_text()
  for broken in ('no markers\n', f'{methods.RESULTS_END}\n{methods.RESULTS_BEGIN}\n',
                 f'{methods.RESULTS_BEGIN}\n{methods.RESULTS_BEGIN}\n{methods.RESULTS_END}\n'):
    path.write_text(broken)
    with pytest.raises(ValueError, match='nothing was written'):
      methods.update_results(str(path), 'table')
    assert path.read_text() == broken


def test_the_second_budget_scales_every_from_scratch_run_and_keeps_its_own_store_and_block(tmp_path):
  """--budget=4: each from-scratch run trains 4x its config's steps (a compute-matched control too, so it stays
  matched), a continue phase keeps its own; the runs, their rows and their tables go to places of their own."""
  assert methods.runner_flags('/w', 'clip', 11, None, budget=methods.SECOND_BUDGET)['total_steps'] == 1600
  assert methods.runner_flags('/w', 'clip_text_pool_compute', 11, None, budget=4)['total_steps'] == 4 * 1355
  assert 'total_steps' not in methods.runner_flags('/w', 'clip', 11, None)  # the first budget: the config's own
  continued = methods.runner_flags('/w_x4', 'saco_continue', 11, None, budget=4)
  assert 'total_steps' not in continued and continued['init.checkpoint'] == '/w_x4/clip/seed11'
  assert methods.run_config('/w', 'saco', 11, None, budget=4).total_steps == 1600
  assert '--config.total_steps=1600' in methods.command('/w', 'cosmos', 11, None, budget=4)
  assert (methods.of_budget('/tmp/m', 1), methods.of_budget('/tmp/m/', 4), methods.of_budget('', 4)) == (
      '/tmp/m', '/tmp/m_x4', '')
  # its rows: each headline method and its control, without the compute-matched controls
  assert methods.expand(['table_budget'], compute_controls=False) == [
      'clip', 'saco', 'slip', 'clip_text_pool_augment_ema', 'cosmos', 'clip_zerovl_temperature', 'zerovl']
  assert 'clip_slip_compute' in methods.expand(['table_budget'])
  # its tables between markers of their own: the first budget's block stays as it was
  first, second = methods.results_markers(1), methods.results_markers(4)
  assert first == (methods.RESULTS_BEGIN, methods.RESULTS_END) and '--budget=4' in second[0] and 'x4' in second[1]
  path = tmp_path / 'RESULTS.md'
  path.write_text(f'{first[0]}\nfirst\n{first[1]}\n{second[0]}\nold\n{second[1]}\n')
  methods.update_results(str(path), 'long runs', budget=4)
  assert path.read_text() == f'{first[0]}\nfirst\n{first[1]}\n{second[0]}\n\nlong runs\n\n{second[1]}\n'
  with open(methods.RESULTS_MD) as f:  # the repository's RESULTS.md holds both blocks once
    text = f.read()
  assert all(text.count(marker) == 1 for marker in first + second)
