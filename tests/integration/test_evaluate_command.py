"""The evaluate command: the same numbers as the in-training evaluation of that step, the same numbers on a
checkpoint exported and imported again with vlp_jax.weights, the results files, and clear errors."""
import json
import os
import shutil
import subprocess
import sys

from support import FAST_COMPILE_XLA_FLAGS, ROOT, micro_config
import numpy as np
from PIL import Image
import pytest
from absl import flags
from ml_collections import config_flags

from vlp_jax import models
from vlp_jax.cli import common
from vlp_jax import interchange as weights
from vlp_jax.cli import evaluate_command
from vlp_jax import errors
from vlp_jax.training.checkpoint import load_config
from vlp_jax.training.loop import latest_eval, train_and_evaluate

# Each test here needs a trained checkpoint (module fixtures): the quick loop leaves them out.
pytestmark = pytest.mark.slow



@pytest.fixture(scope='module')
def trained(data_cache, tmp_path_factory):
  """A workdir whose only checkpoint (step 3) was evaluated during training."""
  config = micro_config(data_cache)
  config.total_steps = 3
  config.eval.tasks = ('zeroshot', 'retrieval', 'affinity', 'compositional')
  workdir = str(tmp_path_factory.mktemp('evaluate') / 'run')
  train_and_evaluate(config, workdir)
  return workdir


def test_evaluate_equals_the_in_training_evaluation(trained, tmp_path):
  in_training = {k: v for k, v in latest_eval(trained).items()}
  assert {'eval/synthetic/zeroshot_top1', 'eval/synthetic/compositional_acc'} <= set(in_training)
  results = evaluate_command.run(trained, output_dir=str(tmp_path / 'out'))
  assert results == in_training  # bit-identical: same model, same eval set, same batches
  saved = json.loads((tmp_path / 'out' / 'eval_results.json').read_text())
  assert saved['metrics'] == in_training and saved['step'] == 3 and saved['split'] == 'test'
  table = (tmp_path / 'out' / 'eval_results.md').read_text()
  assert '| synthetic | zeroshot_top1 | ' in table and 'eval/synthetic/zeroshot_chance' not in table
  row = next(line for line in table.splitlines() if '| zeroshot_top1 |' in line)
  assert row.endswith(f'| {in_training["eval/synthetic/zeroshot_chance"]:.4f} |')  # chance beside the score


def test_evaluate_an_imported_checkpoint_gives_the_original_numbers(trained, tmp_path, monkeypatch):
  original = load_config(trained)
  # The micro architecture as a named preset, so that `weights import` can rebuild it like ViT-B-32.
  spec = original.model.to_dict()
  monkeypatch.setitem(models.PRESETS, 'micro', {k: spec[k] for k in ('embed_dim', 'vision', 'text', 'act')})
  exported = weights.export_weights('hf', trained, str(tmp_path / 'hf'))
  imported = weights.import_weights('hf', 'micro', os.path.join(exported, 'model.safetensors'),
                                    str(tmp_path / 'imported'))
  config = load_config(imported)
  config.data, config.eval = original.data, original.eval  # the same eval set, tasks and batch size
  results, info = evaluate_command.evaluate(imported, evaluate_command.eval_config(config))
  assert info['step'] is None and results == latest_eval(trained)


def test_bad_requests_fail_before_evaluating(trained, tmp_path):
  # --evals and --datasets set config.eval.tasks / .datasets: config.validate names the key and the valid choices.
  with pytest.raises(errors.ConfigError, match=r"config.eval.tasks has 'zeroshoot'.*valid choices: \[.*'affinity'"):
    evaluate_command.run(trained, evals=['zeroshoot'], output_dir=str(tmp_path / 'a'))
  with pytest.raises(errors.ConfigError, match="config.eval.datasets has 'imagenet'.*valid choices"):
    evaluate_command.run(trained, dataset_names=['imagenet'], output_dir=str(tmp_path / 'a'))
  assert not (tmp_path / 'a').exists()
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    evaluate_command.run(str(tmp_path / 'nothing'))
  out = tmp_path / 'kept'
  out.mkdir()
  (out / 'eval_results.json').write_text('{"earlier": 1}')
  with pytest.raises(evaluate_command.EvaluateError, match='--overwrite'):
    evaluate_command.run(trained, output_dir=str(out))
  assert (out / 'eval_results.json').read_text() == '{"earlier": 1}'  # nothing already written is lost


def test_default_output_dir():
  assert evaluate_command.default_output_dir('/w/run/checkpoints/300', 'digits-test') == '/w/run/eval/300/digits-test'
  assert evaluate_command.default_output_dir('/w/imported/', 'digits-test') == '/w/imported-eval/digits-test'


def test_each_evaluation_of_a_checkpoint_keeps_its_own_results(trained, tmp_path):
  """Other eval sets go to their own folders; the same evaluation again is refused, and --overwrite replaces only
  its own results."""
  run = tmp_path / 'run'
  shutil.copytree(os.path.join(trained, 'checkpoints', '3'), run / 'checkpoints' / '3')
  by_set = {name: evaluate_command.run(str(run), evals=['zeroshot'], dataset_names=[name])
            for name in ('synthetic', 'digits')}
  folders = {name: run / 'eval' / '3' / evaluate_command.results_key([name], 'test', {'eval.tasks': ['zeroshot']})
             for name in by_set}
  assert sorted(os.listdir(run / 'eval' / '3')) == sorted(folder.name for folder in folders.values())
  for name, folder in folders.items():
    saved = json.loads((folder / 'eval_results.json').read_text())
    assert saved['metrics'] == by_set[name] and saved['changed_settings'] == {'eval.tasks': ['zeroshot']}
    assert f'eval/{name}/zeroshot_top1' in saved['metrics']
  kept = (folders['synthetic'] / 'eval_results.json').read_bytes()
  (folders['digits'] / 'eval_results.json').write_text('{"earlier": 1}')
  with pytest.raises(evaluate_command.EvaluateError, match='--overwrite'):
    evaluate_command.run(str(run), evals=['zeroshot'], dataset_names=['digits'])
  assert (folders['digits'] / 'eval_results.json').read_text() == '{"earlier": 1}'
  again = evaluate_command.run(str(run), evals=['zeroshot'], dataset_names=['digits'], overwrite=True)
  assert again == by_set['digits']
  assert json.loads((folders['digits'] / 'eval_results.json').read_text())['metrics'] == by_set['digits']
  assert (folders['synthetic'] / 'eval_results.json').read_bytes() == kept  # the other evaluation is untouched


def test_cli_contract(trained, tmp_path):
  env = {**os.environ, 'PYTHONPATH': ROOT}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS  # the CLI as a user runs it: one CPU device
  out = tmp_path / 'cli'
  result = subprocess.run([sys.executable, '-m', 'vlp_jax.evaluate', f'--checkpoint={trained}',
                           '--evals=zeroshot,retrieval', f'--output_dir={out}'], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  metrics = json.loads((out / 'eval_results.json').read_text())['metrics']
  assert {'eval/synthetic/zeroshot_top1', 'eval/synthetic/i2t_r10'} <= set(metrics)
  assert not any('affinity' in name for name in metrics)  # only the evaluators asked for
  assert 'eval/synthetic/zeroshot_top1' in result.stdout
  bad = subprocess.run([sys.executable, '-m', 'vlp_jax.evaluate', f'--checkpoint={trained}', '--evals=nope',
                        f'--output_dir={tmp_path / "bad"}'], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
  assert bad.returncode == 2 and "config.eval.tasks has 'nope'" in bad.stderr
  assert not (tmp_path / 'bad').exists()


def test_cli_config_override_of_an_unknown_eval_set_exits_2_naming_the_choices(trained, tmp_path):
  env = {**os.environ, 'PYTHONPATH': ROOT}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS
  bad = subprocess.run([sys.executable, '-m', 'vlp_jax.evaluate', f'--checkpoint={trained}',
                        '--config.eval.datasets=nope', f'--output_dir={tmp_path / "bad"}'], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2, bad.stderr[-3000:]
  assert "error: config.eval.datasets has 'nope'" in bad.stderr
  assert "valid choices: [" in bad.stderr and "'synthetic'" in bad.stderr and "'digits'" in bad.stderr
  assert 'Traceback' not in bad.stderr and not (tmp_path / 'bad').exists()


def test_a_checkpoint_from_an_earlier_version_gets_the_new_keys_at_their_defaults(trained, tmp_path):
  """Keys added to the config since a checkpoint was written must not make it unreadable."""
  old = tmp_path / 'old' / 'checkpoints' / '3'
  shutil.copytree(os.path.join(trained, 'checkpoints', '3'), old)
  saved = json.loads((old / 'config' / 'metadata').read_text())
  del saved['model']['vision']['type'], saved['data']['max_bad_fraction'], saved['eval']['tasks']
  (old / 'config' / 'metadata').write_text(json.dumps(saved))
  config = load_config(str(old))
  assert config.model.vision.type == 'vit' and config.data.max_bad_fraction == 0.1
  assert config.model.vision.width == saved['model']['vision']['width']  # saved values are kept
  results = evaluate_command.run(str(old), evals=['zeroshot', 'retrieval'], output_dir=str(tmp_path / 'out'))
  assert results == {k: v for k, v in latest_eval(trained).items() if 'affinity' not in k and 'compos' not in k}


def _benchmark_files(root):
  """A two-category SugarCrepe directory (with its images) and a two-group Winoground directory."""
  rng = np.random.default_rng(0)
  (root / 'coco').mkdir()
  (root / 'sugarcrepe').mkdir()
  (root / 'winoground' / 'images').mkdir(parents=True)
  for i in range(3):
    Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(root / 'coco' / f'{i}.jpg')
  for category, count in (('add_att', 3), ('swap_obj', 2)):
    entries = {str(j): {'filename': f'{j % 3}.jpg', 'caption': f'a red circle {j}',
                        'negative_caption': f'a circle red {j}'} for j in range(count)}
    (root / 'sugarcrepe' / f'{category}.json').write_text(json.dumps(entries))
  lines = []
  for g in range(2):
    for k in (0, 1):
      Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
          root / 'winoground' / 'images' / f'ex_{g}_{k}.png')
    lines.append(json.dumps({'id': g, 'image_0': f'ex_{g}_0', 'image_1': f'ex_{g}_1', 'caption_0': 'a star above a box',
                             'caption_1': 'a box above a star'}))
  (root / 'winoground' / 'examples.jsonl').write_text('\n'.join(lines) + '\n')


def test_compositional_benchmarks_from_local_files(trained, tmp_path):
  _benchmark_files(tmp_path)
  overrides = _overrides(f'--config.data.sugarcrepe_dir={tmp_path / "sugarcrepe"}',
                         f'--config.data.sugarcrepe_images={tmp_path / "coco"}',
                         f'--config.data.winoground_dir={tmp_path / "winoground"}')
  results = evaluate_command.run(trained, evals=['compositional', 'retrieval'],
                                 dataset_names=['sugarcrepe', 'winoground'], output_dir=str(tmp_path / 'out'),
                                 overrides=overrides)
  sugarcrepe = {k.split('/')[-1]: v for k, v in results.items() if k.startswith('eval/sugarcrepe/')}
  assert {'compositional_acc_add_att', 'compositional_acc_swap_obj', 'compositional_chance'} <= set(sugarcrepe)
  pooled = (3 * sugarcrepe['compositional_acc_add_att'] + 2 * sugarcrepe['compositional_acc_swap_obj']) / 5
  assert sugarcrepe['compositional_acc'] == pytest.approx(pooled)
  assert {'eval/winoground/winoground_text', 'eval/winoground/winoground_group'} <= set(results)
  assert not any('i2t' in k for k in results)  # neither set has retrieval captions
  with pytest.raises(errors.DataNotFoundError, match='github.com/RAIVNLab/sugar-crepe'):
    evaluate_command.run(trained, dataset_names=['sugarcrepe'], output_dir=str(tmp_path / 'missing'))


def _overrides(*args):
  """{KEY: value} of `--config.KEY=VALUE` words, parsed as the evaluate command parses them (a FlagValues of their
  own, so absl's FLAGS stay untouched)."""
  argv = ['evaluate', *args]
  flag_values = flags.FlagValues()
  evaluate_command.define_config_overrides(flag_values, argv)
  common.parse_flags(argv, flag_values)
  return config_flags.get_override_values(flag_values['config'])


def test_config_overrides_are_typed_and_checked(trained):
  config = load_config(trained)
  # train's syntax and parser: the type of the key in the base config; tuples by repeating the flag or as a literal
  assert _overrides('--config.data.eval_max_examples=100') == {'data.eval_max_examples': 100}
  assert _overrides('--config.eval.datasets=synthetic', '--config.eval.datasets=digits') == {
      'eval.datasets': ('synthetic', 'digits')}
  assert _overrides("--config.eval.datasets=('synthetic', 'digits')") == {'eval.datasets': ('synthetic', 'digits')}
  assert evaluate_command.eval_config(config, overrides=_overrides('--config.eval.split=val')).eval.split == 'val'
  with pytest.raises(errors.ConfigError, match=r"--config.data.eval_max_examples=many: invalid literal for int"):
    _overrides('--config.data.eval_max_examples=many')
  with pytest.raises(errors.ConfigError, match=r"unknown config key 'config.data.tfds_directory'; valid keys"):
    evaluate_command.eval_config(config, overrides=_overrides('--config.data.tfds_directory=/x'))
  with pytest.raises(errors.ConfigError, match='eval_max_examples must be 0'):
    evaluate_command.eval_config(config, overrides=_overrides('--config.data.eval_max_examples=-1'))
  with pytest.raises(errors.ConfigError, match=r"config.eval.split='train' is not valid; valid choices"):
    evaluate_command.eval_config(config, split='train')  # the convenience flags are checked by config.validate too
  with pytest.raises(errors.ConfigError, match='eval.batch_size must be a positive integer'):
    evaluate_command.eval_config(config, batch_size=0)


def test_plots_flag_writes_the_figures(trained, tmp_path):
  out = tmp_path / 'plots'
  evaluate_command.run(trained, evals=['zeroshot'], output_dir=str(out), plots=True)
  written = sorted(os.listdir(out))
  assert written == ['eval_results.json', 'eval_results.md', 'synthetic_affinity_hist.png', 'synthetic_retrieval.png',
                     'synthetic_tsne.png']
  for name in written[2:]:
    assert (out / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert os.path.exists(os.path.join(trained, 'curves.png'))  # the training curves of the checkpoint's workdir
