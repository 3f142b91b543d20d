"""benchmarks/methods.py: which runs a request expands to, their command lines, and the mean +- std table."""
import ast
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import methods  # noqa: E402


def test_expand_puts_dependencies_first_and_rejects_unknown_names():
  assert methods.expand(['saco_continue']) == ['clip', 'saco_continue']
  assert methods.expand(['saco_mimic', 'clip']) == ['clip_teacher', 'saco_mimic', 'clip']
  table = methods.expand(['table'])
  assert table.index('clip') < table.index('saco_continue') and len(table) == len(set(table))
  with pytest.raises(ValueError, match='valid runs'):
    methods.expand(['nope'])


def test_every_run_names_a_config_that_validates():
  from vlp_jax.config import from_file, validate, with_current_defaults
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for name, run in methods.RUNS.items():
    # Every key the --config flag accepts: the file's, and its objective's options left at their defaults.
    config = with_current_defaults(from_file(os.path.join(root, 'configs', f'{run.config}.py')))
    for override in run.overrides:  # '--config.a.b=value' onto the config, typed by the current value
      key, value = override[len('--config.'):].split('=', 1)
      *path, leaf = key.split('.')
      node = config
      for part in path:
        node = node[part]
      old = node[leaf]
      if isinstance(old, bool):
        node[leaf] = value == 'True'
      else:
        node[leaf] = tuple(ast.literal_eval(value)) if isinstance(old, tuple) else type(old)(value)
    if run.after:
      config.init.checkpoint = '/some/run'
    if run.teacher:
      config.objective.saco.teacher_checkpoint = '/some/teacher'
    validate(config)


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
    rows.append({'run': 'clip', 'seed': seed, **metrics, 'wall_seconds': 10.0})
  line = methods.table(rows, ['clip'], {}).splitlines()[2]
  assert '0.300 ± 0.141' in line  # zero-shot mean and sample std of 0.2 and 0.4
  assert '0.300 ± 0.141' in line.split('|')[3]  # mean R@1: 0.2 and 0.4
  assert 'seeds 0,1' in line and '1.00x' in line


def test_paired_table_subtracts_the_control_of_the_same_seed():
  def row(run, seed, zeroshot):
    return {'run': run, 'seed': seed, 'synthetic/zeroshot_top1': zeroshot}
  rows = [row('clip', 0, 0.2), row('clip', 1, 0.4), row('clip_crop', 0, 0.1), row('clip_crop', 1, 0.3),
          row('slip_paper_views', 0, 0.15), row('slip_paper_views', 1, 0.5),
          row('slip_paper_views', 2, 0.9)]  # seed 2 has no control: left out
  lines = methods.paired_table(rows, ['clip', 'clip_crop', 'slip_paper_views']).splitlines()
  assert len(lines) == 2 + 3  # clip_crop - clip, slip_paper_views - clip, slip_paper_views - clip_crop
  vs_clip, vs_crop = lines[3], lines[4]
  assert '`slip_paper_views` − `clip` (seeds 0,1)' in vs_clip
  assert vs_clip.split('|')[2].strip() == '+0.025 ± 0.106 (1/2)'  # differences -0.05 and +0.1
  assert '`slip_paper_views` − `clip_crop` (seeds 0,1)' in vs_crop
  assert vs_crop.split('|')[2].strip() == '+0.125 ± 0.106 (2/2)'  # differences 0.05 and 0.2
  assert vs_crop.split('|')[3].strip() == '-'  # a metric the rows do not have


def test_a_low_data_run_is_paired_with_the_low_data_clip_not_the_full_data_one():
  rows = [{'run': run, 'seed': 0, 'synthetic/zeroshot_top1': value}
          for run, value in (('clip', 0.9), ('clip_lowdata', 0.3), ('clip_crop_lowdata', 0.1), ('slip_lowdata', 0.2))]
  lines = methods.paired_table(rows, ['clip', 'clip_lowdata', 'clip_crop_lowdata', 'slip_lowdata']).splitlines()[2:]
  assert [line.split('|')[1].strip() for line in lines] == [
      '`clip_crop_lowdata` − `clip_lowdata` (seeds 0)', '`slip_lowdata` − `clip_lowdata` (seeds 0)',
      '`slip_lowdata` − `clip_crop_lowdata` (seeds 0)']
  assert [line.split('|')[2].strip() for line in lines] == ['-0.200 ± 0.000 (0/1)', '-0.100 ± 0.000 (0/1)',
                                                           '+0.100 ± 0.000 (1/1)']


def test_batch_duplicates_counts_rows_that_share_a_caption():
  from benchmarks import batch_duplicates as dup
  assert dup.duplicated_fraction(['a', 'b', 'a', 'c']) == 0.5
  assert dup.duplicated_fraction(['a', 'b']) == 0.0
  pools = {'a': [f'a {i}' for i in range(100)], 'b': [f'b {i}' for i in range(100)],
           'templated': [f'template {i % 3}' for i in range(100)]}  # 3 captions, about 33 copies each
  result = dup.batch_duplicates(pools, batch_size=10, batches=400, seed=0)
  assert result['per_source']['a'] == result['per_source']['b'] == 0.0 and result['per_source']['templated'] > 0.9
  # a third of single-source batches are templated (about 1/3 x 0.97); a mixed batch holds ~3 templated rows
  assert 0.25 < result['single_source'] < 0.42 and result['mixed'] < result['single_source'] - 0.05
