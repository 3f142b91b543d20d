"""lab/runner.py: the command line of each run, its store of finished rows, what a resumed or evaluation-only run
records, the time left, and the second budget's steps."""
import concurrent.futures
import os
import subprocess

import pytest

from lab import catalogue, report, runner, statistics

def test_commands_chain_continue_runs_and_teachers():
  cmd = runner.command('/w', 'saco_continue', 3, steps=800)
  assert '--config=configs/saco_continue_shapes.py' in cmd and '--config.seed=3' in cmd
  assert '--config.init.checkpoint=/w/clip/seed3' in cmd
  assert not any(a.startswith('--config.total_steps') for a in cmd)  # a continue phase keeps its budget
  assert '--config.total_steps=800' in runner.command('/w', 'clip', 3, steps=800)
  # the table reads the final eval only: no run evaluates on the way unless asked
  assert f'--config.eval.every_steps={runner.NEVER}' in cmd
  assert runner.command('/w', 'clip', 3, steps=None, eval_every=100)[-1] == '--config.eval.every_steps=100'
  mimic = runner.command('/w', 'saco_mimic', 3, steps=None)
  assert f'--config.objective.saco.teacher_checkpoint=/w/clip_teacher/seed{3 + catalogue.TEACHER_SEED_OFFSET}' in mimic


def test_runs_share_a_compilation_cache_under_the_workdir_unless_one_is_set(monkeypatch):
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  assert runner.run_env('/w')['JAX_COMPILATION_CACHE_DIR'] == '/w/jax_cache'
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '/mine')
  assert runner.run_env('/w')['JAX_COMPILATION_CACHE_DIR'] == '/mine'


def test_a_row_that_only_evaluated_a_finished_workdir_is_refused(tmp_path, monkeypatch):
  """A workdir that already holds the final checkpoint (trained by other code) gives an evaluation-only row, which
  the tables leave out; a workdir with an earlier checkpoint resumes a real run."""
  monkeypatch.setattr(runner.subprocess, 'run', lambda *a, **k: subprocess.CompletedProcess(a, 0, '', ''))
  monkeypatch.setattr(runner, 'final_metrics', lambda workdir: {'synthetic/zeroshot_top1': 0.5})
  total = runner.run_config(str(tmp_path), 'clip', 0, None).total_steps
  (tmp_path / 'clip' / 'seed0' / 'checkpoints' / str(total)).mkdir(parents=True)
  (tmp_path / 'clip' / 'seed1' / 'checkpoints' / str(total // 2)).mkdir(parents=True)
  finished = runner.train(str(tmp_path), 'clip', 0, None)
  resumed = runner.train(str(tmp_path), 'clip', 1, None)
  assert finished['evaluation_only'] and finished['resumed']
  assert resumed['resumed'] and 'evaluation_only' not in resumed
  assert resumed['machine'] == runner.machine_name() and runner.machine_name().startswith(f'{os.cpu_count()}-core ')
  kept, refused = statistics.tabulated([finished, resumed])
  assert kept == [resumed] and len(refused) == 1 and 'clip seed 0: evaluation only' in refused[0]
  assert runner.latest_checkpoint_step(str(tmp_path / 'clip' / 'seed1')) == total // 2


def test_a_stored_run_is_not_trained_again(tmp_path, monkeypatch):
  row = {'run': 'clip', 'seed': 7, 'synthetic/zeroshot_top1': 0.5}
  runner.write_row(str(tmp_path / 'store'), row)
  monkeypatch.setattr(runner.subprocess, 'run', lambda *a, **k: pytest.fail('a stored run was trained again'))
  assert runner.train(str(tmp_path / 'w'), 'clip', 7, None, store=str(tmp_path / 'store')) == row
  assert runner.stored_row(str(tmp_path / 'store'), 'clip', 8) is None


def test_a_resumed_runs_wall_time_is_left_out_and_a_checkpoint_is_found(tmp_path):
  rows = [{'wall_seconds': 100.0, 'jobs': 1}, {'wall_seconds': 900.0, 'jobs': 1}, {'wall_seconds': 120.0, 'jobs': 1},
          {'wall_seconds': 20.0, 'jobs': 1, 'resumed': True}, {'wall_seconds': 500.0, 'jobs': 2}]
  assert statistics.mean_of(rows, 'wall_seconds') == 120.0  # the median; resumed: half a run; jobs 2: a shared CPU
  assert statistics.mean_of(rows, 'jobs') == 1.2
  # wall times compare within one machine: the one most rows ran on
  elsewhere = [{**r, 'machine': 'a'} for r in rows] + [{'wall_seconds': 40.0, 'jobs': 1, 'machine': 'b'}]
  assert statistics.timing_machine(elsewhere) == 'a' and statistics.timing_machine(rows) is None
  assert statistics.mean_of(elsewhere, 'wall_seconds', 'a') == 120.0
  assert statistics.mean_of(elsewhere, 'wall_seconds', 'b') == 40.0
  assert not runner.has_checkpoint(str(tmp_path))
  (tmp_path / 'checkpoints' / 'tmp-1').mkdir(parents=True)
  assert not runner.has_checkpoint(str(tmp_path))  # a save that never finished
  (tmp_path / 'checkpoints' / '400').mkdir()
  assert runner.has_checkpoint(str(tmp_path))


def test_time_left_comes_from_each_runs_median_wall_over_runs_trained_from_the_start():
  rows = [{'run': 'clip', 'wall_seconds': w} for w in (80, 90, 400)] + [
      {'run': 'cosmos', 'wall_seconds': 300}, {'run': 'cosmos', 'wall_seconds': 5, 'resumed': True},
      {'run': 'slip', 'wall_seconds': 2, 'evaluation_only': True}]
  # clip's median 90, cosmos's 300 (the resumed run is left out), slip has none: the median of all four, 195
  assert runner.remaining_seconds(['clip', 'clip', 'cosmos', 'slip'], rows) == 90 + 90 + 300 + 195
  assert runner.remaining_seconds(['clip', 'cosmos'], rows, jobs=2) == (90 + 300) / 2
  assert runner.remaining_seconds(['clip'], [{'run': 'clip', 'wall_seconds': 3, 'resumed': True}]) is None
  row = {'run': 'saco', 'seed': 11, 'wall_seconds': 81.4, 'synthetic/zeroshot_top1': 0.2634}
  line = runner.progress_line(row, 3, 52, 2.0 * 3600)
  assert line == '[3/52] saco seed 11: 81 s, zero-shot top-1 0.263; about 2.0 h left'
  assert runner.progress_line(row, 3, 52, 600).endswith('; about 10 min left')
  assert runner.progress_line({**row, 'run': 'clip'}, 52, 52, None) == '[52/52] clip seed 11: 81 s'  # no METRICS


def test_progress_reports_each_run_it_trains_with_the_time_the_rest_should_take(tmp_path, capsys):
  planned = runner.planned_runs(['saco_mimic'], [0, 1])
  assert planned == [('clip_teacher', 1000), ('saco_mimic', 0), ('clip_teacher', 1001), ('saco_mimic', 1)]
  store = str(tmp_path)
  runner.write_row(store, {'run': 'clip_teacher', 'seed': 1000, 'wall_seconds': 80.0})
  progress = runner.Progress(planned, store)
  assert progress.first_line() == '1 of 4 runs stored; 3 to train, 1 at a time.'
  stored = runner.stored_row(store, 'clip_teacher', 1000)
  assert progress.reported(stored) is stored and capsys.readouterr().out == ''  # a stored run is not reported
  progress.reported({'run': 'saco_mimic', 'seed': 0, 'wall_seconds': 200.0, 'synthetic/zeroshot_top1': 0.25})
  # left: the teacher of seed 1 (the teacher's median, 80 s) and saco_mimic seed 1 (200 s)
  assert capsys.readouterr().out == '[1/3] saco_mimic seed 0: 200 s, zero-shot top-1 0.250; about 5 min left\n'


def test_a_stored_run_needs_no_checkpoint_of_its_start_or_teacher(tmp_path, monkeypatch):
  """A stored row is the run's result: its AFTER and TEACHER are not trained again for their checkpoints."""
  store = str(tmp_path / 'store')
  row = {'run': 'saco_mimic', 'seed': 7, 'synthetic/zeroshot_top1': 0.5}
  runner.write_row(store, row)
  monkeypatch.setattr(runner.subprocess, 'run', lambda *a, **k: pytest.fail('a prerequisite was trained again'))
  done = concurrent.futures.Future()
  done.set_result({'run': 'clip_teacher'})
  futures = {('clip_teacher', 1007): done}
  assert runner.train_with_prerequisites(str(tmp_path / 'w'), 'saco_mimic', 7, futures, None, store=store) == row
  # not stored: its teacher's checkpoint is missing, so the teacher is trained again before it
  trained = []
  monkeypatch.setattr(runner, 'train', lambda root, name, seed, *a, **k: trained.append((name, seed)) or {})
  runner.train_with_prerequisites(str(tmp_path / 'w'), 'saco_mimic', 8, {('clip_teacher', 1008): done}, None,
                                   store=store)
  assert trained == [('clip_teacher', 1008), ('saco_mimic', 8)]


def test_the_second_budget_scales_every_from_scratch_run_and_keeps_its_own_store():
  """--budget=4: each from-scratch run trains 4x its config's steps (a compute-matched control too, so it stays
  matched), a continue phase keeps its own; the runs, their rows and their tables go to places of their own."""
  assert runner.runner_flags('/w', 'clip', 11, None, budget=catalogue.SECOND_BUDGET)['total_steps'] == 1600
  assert runner.runner_flags('/w', 'clip_text_pool_compute', 11, None, budget=4)['total_steps'] == 4 * 1355
  assert 'total_steps' not in runner.runner_flags('/w', 'clip', 11, None)  # the first budget: the config's own
  continued = runner.runner_flags('/w_x4', 'saco_continue', 11, None, budget=4)
  assert 'total_steps' not in continued and continued['init.checkpoint'] == '/w_x4/clip/seed11'
  assert runner.run_config('/w', 'saco', 11, None, budget=4).total_steps == 1600
  assert '--config.total_steps=1600' in runner.command('/w', 'cosmos', 11, None, budget=4)
  assert (runner.of_budget('/tmp/m', 1), runner.of_budget('/tmp/m/', 4), runner.of_budget('', 4)) == (
      '/tmp/m', '/tmp/m_x4', '')
  # its rows: each headline method and its control, without the compute-matched controls
  assert catalogue.expand(['table_budget'], compute_controls=False) == [
      'clip', 'saco', 'slip', 'clip_text_pool_augment_ema', 'cosmos', 'clip_zerovl_temperature', 'zerovl']
  assert 'clip_slip_compute' in catalogue.expand(['table_budget'])
  # its rows and tables: a store and a section of their own, read from that store
  assert report.budget_plan(4) == (catalogue.expand(['table_budget'], compute_controls=False),
                                   list(catalogue.HELD_OUT_SEEDS), runner.STORE + '_x4')
  assert report.budget_plan(1)[2] == runner.STORE
