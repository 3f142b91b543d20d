"""lab/catalogue.py: every run of the methods table as data, which runs a request expands to, and that each run
trains its config with only the runner's flags; lab/config_check.py: the configs are those before the move."""
import ast
import os
import subprocess

from absl import flags
from ml_collections import config_flags
import pytest

from lab import catalogue, config_check, runner
from lab.catalogue import ROOT
from vlp_jax.config import from_file, validate

def test_expand_puts_dependencies_first_and_rejects_unknown_names():
  assert catalogue.expand(['saco_continue']) == ['clip', 'clip_continue', 'saco_continue']  # its start and its control
  # its teacher trains with another seed, not as a row
  assert catalogue.expand(['saco_mimic', 'clip']) == ['clip', 'clip_mimic_compute', 'saco_mimic']
  # its control, then each of its compute-matched controls (COMPUTE_CONTROL may name several)
  assert catalogue.expand(['cosmos']) == ['clip', 'clip_text_pool_augment_ema', 'clip_text_pool_compute',
                                        'clip_cosmos_compute', 'cosmos']
  table = catalogue.expand(['table'])
  assert table.index('clip') < table.index('saco_continue') and len(table) == len(set(table))
  with pytest.raises(ValueError, match='valid runs'):
    catalogue.expand(['nope'])


def test_a_run_names_its_config_and_every_experiment_file_is_some_runs():
  assert catalogue.RUNS['clip'].config == 'configs/clip_shapes.py'
  assert catalogue.RUNS['saco_mimic'].config == 'lab/experiments/saco_mimic.py'
  assert catalogue.RUNS['siglip2_decoder_only'].config == 'lab/experiments/siglip2_ablation.py:decoder_only'
  assert catalogue.config_file(catalogue.RUNS['siglip2_decoder_only']) == ('lab/experiments/siglip2_ablation.py',
                                                                          'decoder_only')
  shipped = {f'configs/{n}' for n in os.listdir(os.path.join(ROOT, 'configs')) if n.endswith('_shapes.py')}
  experiments = {f'lab/experiments/{n}' for n in os.listdir(os.path.join(ROOT, 'lab', 'experiments'))
                 if n.endswith('.py')}
  # every such file is some run's, and a run's file is one of them
  assert {catalogue.config_file(run)[0] for run in catalogue.RUNS.values()} == shipped | experiments
  for name in catalogue.RUNS:
    assert catalogue.load_config(name) is not None, name


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
  for name, run in catalogue.RUNS.items():
    cmd = runner.command('/w', name, 3, steps, eval_every)
    assert cmd[1:3] == ['-m', 'vlp_jax.main'] and cmd[3] == f'--config={run.config}'
    config = runner.run_config('/w', name, 3, steps, eval_every)
    assert _flag_config(cmd[3:]).to_json() == config.to_json(), name
    assert config.seed == 3 and config.eval.every_steps == (eval_every or runner.NEVER)
    if run.after:
      assert config.init.checkpoint == f'/w/{run.after}/seed3'
    elif steps:
      assert config.total_steps == steps
    validate(config)


def test_runs_are_compared_only_with_clips_and_controls_of_the_same_data_and_budget():
  """Every name a run file or a group gives is a run; a run's BASELINE is a CLIP, and its BASELINE and CONTROL train
  on the same embedded data as it, for as many steps when they start the same way (both from scratch, or both from
  the same AFTER run), except a compute-matched control, whose budget is its method's FLOPs."""
  configs = {name: catalogue.load_config(name) for name in catalogue.RUNS}
  compute_matched = {c for run in catalogue.RUNS.values() for c in run.compute_controls}  # their budget is the FLOPs'
  for name, run in catalogue.RUNS.items():
    for other in (run.baseline, run.control, run.after, run.teacher):
      assert other is None or other in catalogue.RUNS, (name, other)
    baseline = configs[run.baseline]
    assert baseline.objective.name == 'clip' and not baseline.objective.terms, (name, run.baseline)
    for other in {run.baseline, run.control} - {None}:
      mine, theirs = configs[name].data.synthetic.to_dict(), configs[other].data.synthetic.to_dict()
      if not configs[other].objective.get('decoder_weight'):  # only a decoder reads regions, shuffled or not
        mine.pop('shuffle_regions'), theirs.pop('shuffle_regions')
      assert mine == theirs, (name, other)
      if catalogue.RUNS[other].after == run.after and name not in compute_matched:
        assert configs[other].total_steps == configs[name].total_steps, (name, other)
  for group, names in catalogue.GROUPS.items():
    assert names and set(names) <= set(catalogue.RUNS), (group, set(names) - set(catalogue.RUNS))
  assert not set(catalogue.GROUPS) & set(catalogue.RUNS)  # a name means one thing to --methods
  assert catalogue.expand(['all']) and set(catalogue.expand(['all'])) == set(catalogue.RUNS)


def test_every_experiment_file_says_what_it_is_in_a_short_docstring():
  for path in {catalogue.config_file(run)[0] for run in catalogue.RUNS.values()}:
    if path.startswith('lab/experiments/'):
      with open(os.path.join(ROOT, path)) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
      assert doc and 2 <= len(doc.splitlines()) <= 5, path


def _flat(tree: dict, prefix: str = '') -> dict:
  return {k: v for key, value in tree.items()
          for k, v in (_flat(value, f'{prefix}{key}.') if isinstance(value, dict)
                       else {f'{prefix}{key}': value}).items()}


def test_cosmos_baseline_and_saco_mimic_alone_change_only_their_keys():
  """COSMOS's baseline is its text-pool CLIP with the augmentation and the EMA, and nothing else; the mimic alone is
  saco_mimic with SaCo's term weighed 0, and Algorithm 1 saco_mimic with a constant alpha, and nothing else."""
  flat = lambda name: _flat(catalogue.load_config(name).to_dict())  # noqa: E731
  diff = lambda a, b: {k: (flat(a).get(k), flat(b).get(k)) for k in flat(a) | flat(b)  # noqa: E731
                       if flat(a).get(k) != flat(b).get(k)}
  assert diff('clip_text_pool', 'clip_text_pool_augment_ema') == {'data.augment': ('none', 'dino'),
                                                                  'ema.decay': (0.0, 0.99)}
  assert diff('saco_mimic', 'saco_mimic_only') == {'objective.saco.alpha': (5.0, 0.0)}
  assert diff('saco_mimic', 'saco_constant') == {'objective.saco.ramp': ('linear', 'constant')}
  assert diff('clip', 'clip_cosmos_compute') == {'total_steps': (400, 1355)}
  assert catalogue.RUNS['cosmos'].control == 'clip_text_pool_augment_ema'


def test_check_rejects_a_run_that_names_no_run_a_metric_that_is_no_column_and_a_bad_group():
  runs = {'clip': catalogue.Run('configs/clip_shapes.py', 'CLIP'),
          'wide': catalogue.Run('lab/experiments/wide.py', 'Wide', control='clip', compute_controls=('clip',),
                                metrics=('synthetic/zeroshot_top1',))}
  catalogue.check(runs, {'both': ('clip', 'wide')})  # a valid catalogue passes
  with pytest.raises(ValueError, match="control names 'clip_wide', which is not a run"):
    catalogue.check({**runs, 'wide': catalogue.Run('w.py', 'Wide', control='clip_wide')}, {})
  with pytest.raises(ValueError, match="compute_controls names 'clip_long'"):
    catalogue.check({**runs, 'wide': catalogue.Run('w.py', 'Wide', compute_controls=('clip', 'clip_long'))}, {})
  with pytest.raises(ValueError, match="teacher names 'nope'"):
    catalogue.check({**runs, 'wide': catalogue.Run('w.py', 'Wide', teacher='nope')}, {})
  with pytest.raises(ValueError, match=r"unknown: \['synthetic/top1'\]"):
    catalogue.check({**runs, 'wide': catalogue.Run('w.py', 'Wide', metrics=('synthetic/top1',))}, {})
  with pytest.raises(ValueError, match='group wide'):  # a name means one thing to --methods
    catalogue.check(runs, {'wide': ('clip',)})
  with pytest.raises(ValueError, match=r"unknown runs \['slim'\]"):
    catalogue.check(runs, {'both': ('clip', 'slim')})


def test_siglip2s_ablations_change_only_their_keys_of_the_recipe():
  recipe = _flat(catalogue.load_config('siglip2').to_dict())
  changed = {name: {k: v for k, v in _flat(catalogue.load_config(name).to_dict()).items() if recipe.get(k) != v}
             for name in ('siglip2_decoder_only', 'siglip2_distill_only', 'siglip2_masked_only',
                          'siglip2_captions_only', 'siglip2_shuffled_boxes')}
  assert changed == {
      'siglip2_decoder_only': {'objective.distill_weight': 0.0, 'objective.masked_weight': 0.0},
      'siglip2_distill_only': {'objective.decoder_weight': 0.0, 'objective.masked_weight': 0.0},
      'siglip2_masked_only': {'objective.decoder_weight': 0.0, 'objective.distill_weight': 0.0},
      'siglip2_captions_only': {'objective.decoder_tasks': ('cap',)},
      'siglip2_shuffled_boxes': {'data.synthetic.shuffle_regions': True}}
  with pytest.raises(ValueError, match="unknown ablation 'boxes'"):
    from_file(os.path.join(ROOT, 'lab', 'experiments', 'siglip2_ablation.py'), 'boxes')


def test_zerovls_components_alone_differ_from_the_recipe_in_the_sampler_and_the_objectives_switches_only():
  recipe = _flat(catalogue.load_config('zerovl').to_dict())
  switches = {'data.mixing', 'objective.mixup', 'objective.text_augment'}
  alone = {}
  for name in ('zerovl_mixup', 'zerovl_single_source', 'zerovl_text_augment'):
    flat = _flat(catalogue.load_config(name).to_dict())
    assert {k for k in flat if flat[k] != recipe.get(k)} <= switches, name
    alone[name] = tuple(flat[k] for k in sorted(switches))
  assert alone == {'zerovl_mixup': ('mixed', True, False), 'zerovl_single_source': ('single_source', False, False),
                   'zerovl_text_augment': ('mixed', False, True)}
  with pytest.raises(ValueError, match="unknown component 'all'"):
    from_file(os.path.join(ROOT, 'lab', 'experiments', 'zerovl_component.py'), 'all')


def test_the_config_check_tells_types_apart_and_reads_the_old_layout(tmp_path):
  assert config_check.canonical({'b': 1, 'a': {'x': (1,)}}) == config_check.canonical({'a': {'x': (1,)}, 'b': 1})
  assert config_check.canonical({'a': 0}) != config_check.canonical({'a': 0.0})
  assert config_check.canonical({'a': (1,)}) != config_check.canonical({'a': [1]})
  (tmp_path / 'configs' / 'experiments').mkdir(parents=True)
  shipped = 'from vlp_jax.config import base_config\n\ndef get_config():\n  return base_config()\n'
  (tmp_path / 'configs' / 'clip_shapes.py').write_text(shipped)
  (tmp_path / 'configs' / 'experiments' / 'wide.py').write_text(shipped.replace('return base_config()',
                                                                               'c = base_config(); c.seed = 7; return c'))
  assert config_check.config_at(str(tmp_path), 'clip').seed == 0  # configs/<name>_shapes.py first
  assert config_check.config_at(str(tmp_path), 'wide').seed == 7  # else configs/experiments/<name>.py


@pytest.mark.skipif(subprocess.run(['git', 'cat-file', '-e', f'{config_check.BEFORE_THE_MOVE}^{{commit}}'], cwd=ROOT,
                                   capture_output=True).returncode != 0, reason='a clone without that commit')
def test_every_run_trains_the_config_it_trained_before_the_move():
  assert config_check.differing_runs() == []
  for name in config_check.ADDED_AFTER_THE_MOVE:  # left out of the check only because they had no config then
    assert name in catalogue.RUNS
    for path in (f'configs/{name}_shapes.py', f'configs/experiments/{name}.py'):
      assert subprocess.run(['git', 'cat-file', '-e', f'{config_check.BEFORE_THE_MOVE}:{path}'], cwd=ROOT,
                            capture_output=True).returncode != 0, path


def test_compute_matched_controls_train_for_the_flops_their_method_was_measured_at():
  """Each compute-matched control's budget is its method's training FLOPs (plus its TEACHER's training), as XLA
  counted them in the stored runs, over the FLOPs of one of its own steps (to a step)."""
  load = catalogue.load_config

  def flops(name: str) -> float | None:
    """A stored run's training FLOPs (any seed: they do not depend on it)."""
    seeds = [*range(6), *range(catalogue.TEACHER_SEED_OFFSET, catalogue.TEACHER_SEED_OFFSET + 6)]
    rows = [r for r in (runner.stored_row(runner.STORE, name, s) for s in seeds) if r]
    return rows[0]['train_flops'] if rows else None

  checked = 0
  for name, run in catalogue.RUNS.items():
    for control in run.compute_controls:
      if flops(name) is None or flops(control) is None:
        continue
      spent = flops(name) + (flops('clip_teacher') if run.teacher else 0.0)
      step = flops(control) / load(control).total_steps
      assert load(control).total_steps == round(spent / step), (name, control, spent / step)
      checked += 1
  assert checked >= 2  # SLIP and COSMOS are stored; SaCo's mimic once it is


def test_the_config_check_leaves_out_only_the_keys_changed_on_purpose():
  tree = {'eval': {'datasets': ('a',), 'every_steps': 5}, 'seed': 1}
  assert config_check.without(tree) == {'eval': {'every_steps': 5}, 'seed': 1}
  assert tree['eval']['datasets'] == ('a',)  # the config's own dict is left as it was
  assert config_check.canonical(config_check.without({**tree, 'seed': 2})) != config_check.canonical(
      config_check.without(tree))
