"""The train CLI end to end: metrics.jsonl and TensorBoard names follow the contract, checkpoints hold state, data
iterator and config, a rerun resumes or reports that training finished, and missing data gives instructions. And
every command's exit code for a bad request: 2, with one `error:` line."""
import json
import os
import subprocess
import sys

from support import FAST_COMPILE_XLA_FLAGS, ROOT, tensorboard_events
import pytest

from vlp_jax import errors
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.cli import convert_command, embed_command, evaluate_command, weights_command
from vlp_jax.training.checkpoint import load_config


MICRO_FLAGS = [
    '--config.total_steps=4', '--config.batch_size=16', '--config.log_every_steps=2', '--config.eval.every_steps=2',
    '--config.checkpoint.every_steps=2', '--config.model.embed_dim=32', '--config.model.vision.width=32',
    '--config.model.vision.layers=1', '--config.model.vision.heads=2', '--config.model.text.width=32',
    '--config.model.text.layers=1', '--config.model.text.heads=2', '--config.model.text.context_length=16',
    '--config.data.synthetic.num_train=64', '--config.data.synthetic.num_val=16',
    '--config.data.synthetic.num_test=32', '--config.optim.warmup_steps=1',
    # The evaluation the contract names (CONTRACT_EVAL, on the synthetic set): each other set or task of the config
    # would compile and run in every run too.
    "--config.eval.datasets=('synthetic',)", "--config.eval.tasks=('zeroshot', 'retrieval', 'affinity')"]
CONTRACT_EVAL = ('zeroshot_top1', 'zeroshot_top5', 'zeroshot_chance', 'i2t_r1', 'i2t_r5', 'i2t_r10', 't2i_r1',
                 't2i_r5', 't2i_r10', 'affinity_consistency')


def _run(args, tmp_path, command='main'):
  env = {**os.environ, 'PYTHONPATH': ROOT, 'VLP_JAX_CACHE': str(tmp_path / 'cache')}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS  # the CLI as a user runs it: one CPU device
  return subprocess.run([sys.executable, '-m', f'vlp_jax.{command}', *args], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)


def _tensorboard_tags(workdir):
  """Scalar tags in the TensorBoard event files."""
  return {v.tag for event in tensorboard_events(workdir) for v in event.summary.value}


@pytest.mark.slow
def test_cli_trains_evaluates_checkpoints_and_resumes(tmp_path):
  workdir = tmp_path / 'run'
  # a peak for the CPU (1 TFLOP/s): the MFU of the architecture's FLOPs and of the executed ones are logged
  first = _run(['--config=configs/clip_shapes.py', f'--workdir={workdir}', *MICRO_FLAGS,
                '--config.total_steps=2', '--config.log.peak_device_tflops=1'], tmp_path)
  assert first.returncode == 0, first.stderr[-3000:]
  assert 'step 2/2' in first.stdout and 'samples/s' in first.stdout
  # what is evaluated, said once before the first step; no task is skipped here, so no hint of --verbose
  assert first.stdout.count('Eval sets: ') == 1 and 'Eval sets: synthetic (zeroshot, retrieval, affinity)\n' in \
      first.stdout.split('Compiling the train step')[0]
  assert 'GFLOP per device, from XLA; the architecture: ' in first.stdout and '| MFU ' in first.stdout
  logged = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert any(r.get('perf/mfu', 0) > 0 and r.get('perf/mfu_executed', 0) > 0 for r in logged)
  # Extending the run resumes from the step-2 checkpoint.
  second = _run(['--config=configs/clip_shapes.py', f'--workdir={workdir}', *MICRO_FLAGS], tmp_path)
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'Resumed from step 2' in second.stdout and 'Finished training at step 4' in second.stdout
  records = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert all('step' in r for r in records)
  names = set().union(*records)
  assert {'train/loss', 'perf/samples_per_sec', 'train/learning_rate', 'perf/step_flops',
          'perf/device_tflops_per_sec'} <= names  # XLA's FLOPs of the step, and the utilisation
  assert {f'eval/synthetic/{m}' for m in CONTRACT_EVAL} <= names
  assert sorted(r['step'] for r in records if 'eval/synthetic/zeroshot_top1' in r) == [2, 4]
  assert {f'eval/synthetic/{m}' for m in CONTRACT_EVAL} | {'train/loss', 'perf/samples_per_sec'} <= \
      _tensorboard_tags(workdir)
  step_dir = workdir / 'checkpoints' / '4'
  assert {'state', 'data', 'config'} <= set(os.listdir(step_dir))
  assert not [d for d in os.listdir(workdir / 'checkpoints') if 'tmp' in d]
  assert (workdir / 'curves.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  # The checkpoint alone rebuilds the model.
  config = load_config(str(step_dir))
  assert config.model.vision.width == 32 and config.total_steps == 4
  params = load_variables(str(step_dir))[0]
  assert params['visual']['conv1']['kernel'].shape == (8, 8, 3, 32)
  # Done: a third run says so and exits cleanly.
  third = _run(['--config=configs/clip_shapes.py', f'--workdir={workdir}', *MICRO_FLAGS], tmp_path)
  assert third.returncode == 0 and 'Training already finished' in third.stdout


def test_cli_without_data_explains_how_to_prepare_it(tmp_path):
  # saco_cc3m needs teacher embeddings besides the data: both are listed at once, each with its fix
  result = _run(['--config=configs/saco_cc3m.py', f'--workdir={tmp_path / "run"}'], tmp_path)
  assert result.returncode == 2
  assert 'this run needs 5 inputs it does not have' in result.stderr
  assert '1. config.objective.saco.beta > 0 (pseudo-affinity mimic) needs teacher embeddings' in result.stderr
  assert '2. config.data.path is empty' in result.stderr and 'python -m vlp_jax.convert' in result.stderr
  assert "5. config.eval.datasets has flickr30k: no dataset_flickr30k.json in config.data.flickr30k_dir=''" \
      in result.stderr  # and ImageNet and COCO in config.data.tfds_dir, before anything compiles
  assert not (tmp_path / 'run').exists()  # nothing is created before the data is found


@pytest.mark.slow
def test_a_missing_config_file_or_data_folder_is_a_bad_request_in_one_line(tmp_path):
  for args, message in (
      (['--config=configs/no_such_config.py'], '--config=configs/no_such_config.py: the config file cannot be loaded: '
                                               'no such file'),
      (['--config=configs/clip_shapes.py', '--config.data.name=webdataset', f'--config.data.path={tmp_path}/nowhere'],
       f"config.data.path entry '{tmp_path}/nowhere' matches no tar shard")):
    result = _run([*args, f'--workdir={tmp_path / "run"}'], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    errors_printed = [line for line in result.stderr.splitlines() if line.startswith('error: ')]
    assert len(errors_printed) == 1 and message in errors_printed[0], result.stderr[-3000:]
    assert 'Traceback' not in result.stderr and 'warning: webdataset shard' not in result.stderr
  assert not (tmp_path / 'run').exists()


# A bad request to each command (python -m vlp_jax.<command>): its arguments ({tmp} is a fresh folder) and what the
# error line names. Each fails before anything is loaded, compiled or written.
BAD_REQUESTS = {
    'main': (['--config=configs/clip_shapes.py', '--workdir={tmp}/run', '--config.eval.datasets=nope'],
             "config.eval.datasets has 'nope', which is not a registered eval set; valid choices: ["),
    'evaluate': (['--checkpoint={tmp}/run', '--config.eval.datasets=nope'], 'no checkpoint at'),
    'embed': (['--checkpoint={tmp}/run', '--output={tmp}/run/e.npz'], 'nothing to embed'),
    'weights': (['frobnicate', '--format=hf', '--checkpoint={tmp}/run', '--output={tmp}/run/hf'],
                "unknown command 'frobnicate'; valid choices: ['import', 'export']"),
    'convert': (['--format=parquet', '--input={tmp}', '--output={tmp}/run'], "--format 'parquet' is not known"),
}


@pytest.mark.slow
@pytest.mark.parametrize('command', sorted(BAD_REQUESTS))
def test_every_command_exits_2_on_a_bad_request_or_a_bad_flag(command, tmp_path):
  args, message = BAD_REQUESTS[command]
  args = [arg.format(tmp=tmp_path) for arg in args]
  for result, expected in ((_run(args, tmp_path, command), message),
                           (_run([*args, '--no_such_flag=1'], tmp_path, command),
                            "Unknown command line flag 'no_such_flag'")):
    assert result.returncode == 2, result.stderr[-3000:]
    error_line = next(line for line in result.stderr.splitlines() if line.startswith('error: '))
    assert expected in error_line, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
  assert not (tmp_path / 'run').exists()
  asked_for_help = _run(['--help'], tmp_path, command)  # absl exits 1 after the usage; asking is no failure
  assert asked_for_help.returncode == 0 and '--' in asked_for_help.stdout, asked_for_help.stderr[-3000:]


def test_each_commands_error_is_a_bad_request():
  for error in (evaluate_command.EvaluateError, embed_command.EmbedError, weights_command.WeightsError,
                convert_command.ConvertError):
    assert issubclass(error, errors.ConfigError) and errors.exit_code(error('bad')) == errors.EXIT_CONFIG == 2
