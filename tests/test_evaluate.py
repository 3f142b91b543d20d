"""The evaluate command: the same numbers as the in-training evaluation of that step, the same numbers on a
checkpoint exported and imported again with vlp_jax.weights, the results files, and clear errors."""
import json
import os
import subprocess
import sys

import pytest

from vlp_jax import evaluate, models, weights
from vlp_jax.training.checkpoint import load_config
from vlp_jax.training.loop import latest_eval, train_and_evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def trained(data_cache, tmp_path_factory):
  """A workdir whose only checkpoint (step 3) was evaluated during training."""
  from micro_config import micro_config
  config = micro_config(data_cache)
  config.total_steps = 3
  config.eval.tasks = ('zeroshot', 'retrieval', 'affinity', 'compositional')
  workdir = str(tmp_path_factory.mktemp('evaluate') / 'run')
  train_and_evaluate(config, workdir)
  return workdir


def test_evaluate_equals_the_in_training_evaluation(trained, tmp_path):
  in_training = {k: v for k, v in latest_eval(trained).items()}
  assert {'eval/synthetic/zeroshot_top1', 'eval/synthetic/compositional_acc'} <= set(in_training)
  results = evaluate.run(trained, output_dir=str(tmp_path / 'out'))
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
  results, info = evaluate.evaluate(imported, evaluate.eval_config(config))
  assert info['step'] is None and results == latest_eval(trained)


def test_bad_requests_fail_before_evaluating(trained, tmp_path):
  with pytest.raises(evaluate.EvaluateError, match=r"--evals has 'zeroshoot'; valid choices: \['affinity'"):
    evaluate.run(trained, evals=['zeroshoot'], output_dir=str(tmp_path / 'a'))
  with pytest.raises(evaluate.EvaluateError, match="--datasets has 'imagenet'; valid choices"):
    evaluate.run(trained, dataset_names=['imagenet'], output_dir=str(tmp_path / 'a'))
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    evaluate.run(str(tmp_path / 'nothing'))
  out = tmp_path / 'kept'
  out.mkdir()
  (out / 'eval_results.json').write_text('{"earlier": 1}')
  with pytest.raises(evaluate.EvaluateError, match='--overwrite'):
    evaluate.run(trained, output_dir=str(out))
  assert (out / 'eval_results.json').read_text() == '{"earlier": 1}'  # nothing already written is lost


def test_default_output_dir():
  assert evaluate.default_output_dir('/w/run/checkpoints/300') == '/w/run/eval/300'
  assert evaluate.default_output_dir('/w/imported/') == '/w/imported-eval'


def test_cli_contract(trained, tmp_path):
  env = {**os.environ, 'PYTHONPATH': ROOT}
  env.pop('XLA_FLAGS', None)  # the CLI as a user runs it: one CPU device
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
  assert bad.returncode == 2 and "--evals has 'nope'" in bad.stderr
  assert not (tmp_path / 'bad').exists()


def test_a_checkpoint_from_an_earlier_version_gets_the_new_keys_at_their_defaults(trained, tmp_path):
  """Keys added to the config since a checkpoint was written must not make it unreadable."""
  import shutil
  old = tmp_path / 'old' / 'checkpoints' / '3'
  shutil.copytree(os.path.join(trained, 'checkpoints', '3'), old)
  saved = json.loads((old / 'config' / 'metadata').read_text())
  del saved['model']['vision']['type'], saved['data']['max_bad_fraction'], saved['eval']['tasks']
  (old / 'config' / 'metadata').write_text(json.dumps(saved))
  config = load_config(str(old))
  assert config.model.vision.type == 'vit' and config.data.max_bad_fraction == 0.1
  assert config.model.vision.width == saved['model']['vision']['width']  # saved values are kept
  results = evaluate.run(str(old), evals=['zeroshot', 'retrieval'], output_dir=str(tmp_path / 'out'))
  assert results == {k: v for k, v in latest_eval(trained).items() if 'affinity' not in k and 'compos' not in k}
