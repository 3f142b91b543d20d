"""CLIP_benchmark on a vlp_jax checkpoint (vlp_jax/cli/clip_benchmark_command.py): the loader's model, transform and
tokenizer give `vlp_jax.load`'s embeddings, and `python -m vlp_jax.clip_benchmark eval` runs CLIP_benchmark's zero-shot
classification on a generated webdataset set to the accuracy computed here with `vlp_jax.load`.

Without torchvision (CLIP_benchmark's CLI imports it, but never calls it for a webdataset set), the command's
subprocess imports it as placeholders (`support.use_placeholder_torchvision`)."""
import io
import json
import os
import subprocess
import sys
import tarfile

import jax
import numpy as np
import pytest
from PIL import Image

import vlp_jax
from support import FAST_COMPILE_XLA_FLAGS, ROOT, TESTS
from vlp_jax import errors, models
from vlp_jax import interchange as weights

torch = pytest.importorskip('torch', reason='the CLIP_benchmark loader returns torch tensors')
from vlp_jax.cli import clip_benchmark_command  # noqa: E402  (imports torch)

CAPTIONS = ['a red circle', 'a drawing of a blue star', '', 'two green triangles ' * 10]
CLASSES = ['red circle', 'green square', 'blue star', 'yellow triangle', 'white cross']
TEMPLATES = ['a photo of a {c}.', 'a drawing of a {c}.']


@pytest.fixture
def checkpoint(micro, tmp_path):
  """An 'imported' checkpoint of the micro model (16px images, context 16, d=32) with random weights."""
  params, state = models.init_variables(models.build_model(micro.model), jax.random.key(5))
  return weights.save_checkpoint(str(tmp_path / 'ckpt'), jax.tree.map(np.asarray, params), state, micro)


def _images(seed: int = 0) -> list[Image.Image]:
  """PIL images of several sizes and modes, none of them the model's 16x16 RGB."""
  rng = np.random.default_rng(seed)
  return [Image.fromarray(rng.integers(0, 256, (20, 24, 3), np.uint8)),
          Image.fromarray(rng.integers(0, 256, (40, 18), np.uint8), 'L'),
          Image.fromarray(rng.integers(0, 256, (17, 33, 4), np.uint8), 'RGBA'),
          Image.fromarray(rng.integers(0, 256, (16, 16, 3), np.uint8))]


def test_defaults_come_before_the_arguments_so_that_given_ones_win():
  assert clip_benchmark_command.with_defaults(['eval', '--model=ema']) == [
      'eval', '--model_type=vlp_jax', '--model=vlp_jax', '--output={dataset}_{model}_{language}_{task}.json',
      '--model=ema']
  assert clip_benchmark_command.with_defaults(['build', 'a.json']) == ['build', 'a.json']


def test_topk_accuracy():
  logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.3], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
  target = torch.tensor([1, 2, 0, 2])
  assert clip_benchmark_command.topk_accuracy(logits, target, topk=(1, 2, 3)) == [0.5, 0.75, 1.0]
  assert clip_benchmark_command.topk_accuracy(logits, target.float()) == [0.5]  # linear probes pass float targets


@pytest.mark.slow
def test_loader_gives_the_embeddings_of_vlp_jax_load(checkpoint):
  model, transform, tokenizer = clip_benchmark_command.load_vlp_jax('vlp_jax', checkpoint, None, 'cpu')
  assert model.eval() is model  # what CLIP_benchmark calls first
  loaded = vlp_jax.load(checkpoint)
  images = _images()
  batch = torch.stack([transform(image) for image in images])
  assert batch.dtype == torch.float32 and tuple(batch.shape) == (4, 3, 16, 16)
  np.testing.assert_array_equal(batch.permute(0, 2, 3, 1).numpy(), np.stack([loaded.preprocess(i) for i in images]))
  got = model.encode_image(batch)
  assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and tuple(got.shape) == (4, 32)
  np.testing.assert_allclose(got.numpy(), loaded.encode_image(images), rtol=0, atol=1e-6)

  tokens = tokenizer(CAPTIONS)
  assert tokens.dtype == torch.int64 and tuple(tokens.shape) == (4, 16)
  np.testing.assert_array_equal(tokens.numpy(), loaded.tokenize(CAPTIONS))
  got = model.encode_text(tokens)
  assert got.dtype == torch.float32
  np.testing.assert_allclose(got.numpy(), loaded.encode_text(CAPTIONS), rtol=0, atol=1e-6)
  np.testing.assert_allclose(model.encode_text(tokenizer('a red circle')).numpy(), loaded.encode_text(CAPTIONS[:1]),
                             rtol=0, atol=1e-6)


@pytest.mark.slow
def test_loader_rejects_what_it_cannot_load(checkpoint, tmp_path):
  with pytest.raises(clip_benchmark_command.ClipBenchmarkError, match=r"--model='ViT-B-32'.*\['ema', 'vlp_jax'\]"):
    clip_benchmark_command.load_vlp_jax('ViT-B-32', checkpoint)
  with pytest.raises(errors.ConfigError, match='EMA'):
    clip_benchmark_command.load_vlp_jax('ema', checkpoint)  # saved without one
  with pytest.raises(FileNotFoundError, match='no checkpoint at'):
    clip_benchmark_command.load_vlp_jax('vlp_jax', str(tmp_path / 'nothing'))
  model, _, _ = clip_benchmark_command.load_vlp_jax('vlp_jax', checkpoint)
  with pytest.raises(ValueError, match=r'\[N, 3, H, W\]'):
    model.encode_image(torch.zeros(2, 16, 16, 3))
  with pytest.raises(ValueError, match=r'\[N, 16\] integer tokens'):
    model.encode_text(torch.zeros(2, 77, dtype=torch.int64))


def _write_wds_classification_set(root, images: list[Image.Image], labels: list[int]) -> None:
  """CLIP_benchmark's webdataset layout (`build_wds_dataset`): test/nshards.txt, test/0.tar of KEY.png + KEY.cls,
  classnames.txt and zeroshot_classification_templates.txt."""
  os.makedirs(root / 'test')
  (root / 'test' / 'nshards.txt').write_text('1\n')
  (root / 'classnames.txt').write_text('\n'.join(CLASSES) + '\n')
  (root / 'zeroshot_classification_templates.txt').write_text('\n'.join(TEMPLATES) + '\n')
  with tarfile.open(root / 'test' / '0.tar', 'w') as tar:
    for i, (image, label) in enumerate(zip(images, labels)):
      png = io.BytesIO()
      image.save(png, 'PNG')
      for suffix, data in (('png', png.getvalue()), ('cls', str(label).encode())):
        info = tarfile.TarInfo(f's{i:04d}.{suffix}')
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _run_command(args: list[str], cwd) -> subprocess.CompletedProcess:
  """`python -m vlp_jax.clip_benchmark ARGS` in a subprocess (CPU, one device), with torchvision's imports answered
  by placeholders where it is not installed; skips the test without CLIP_benchmark and what its CLI imports."""
  pytest.importorskip('clip_benchmark', reason='CLIP_benchmark (pip install clip-benchmark) runs the evaluation')
  pytest.importorskip('webdataset', reason='CLIP_benchmark reads wds/ sets with webdataset')
  pytest.importorskip('pycocoevalcap', reason="CLIP_benchmark's CLI imports pycocoevalcap")
  code = ('import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); import support; '
          'support.use_placeholder_torchvision(); runpy.run_module("vlp_jax.clip_benchmark", run_name="__main__")')
  env = {**os.environ, 'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS
  return subprocess.run([sys.executable, '-c', code, TESTS, *args], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=300)


@pytest.mark.slow
def test_command_runs_clip_benchmark_zero_shot_classification(checkpoint, tmp_path):
  rng = np.random.default_rng(1)
  images = [Image.fromarray(rng.integers(0, 256, (20, 24, 3), np.uint8)) for _ in range(10)]
  labels = [i % len(CLASSES) for i in range(len(images))]
  _write_wds_classification_set(tmp_path / 'shapes', images, labels)
  output = tmp_path / 'result.json'
  result = _run_command(['eval', '--dataset=wds/shapes', f'--dataset_root={tmp_path / "shapes"}',
                         f'--pretrained={checkpoint}', f'--output={output}', '--num_workers=0', '--batch_size=4',
                         '--no_amp'], cwd=tmp_path)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  dump = json.loads(output.read_text())
  assert dump['task'] == 'zeroshot_classification' and dump['model'] == 'vlp_jax'
  assert dump['pretrained'] == checkpoint
  metrics = dump['metrics']
  assert 0 <= metrics['acc1'] <= 1 and 0 <= metrics['acc5'] <= 1 and 0 <= metrics['mean_per_class_recall'] <= 1

  # The same zero-shot classifier computed with vlp_jax.load: CLIP's template ensemble, argmax of the cosines.
  loaded = vlp_jax.load(checkpoint)
  classifier = np.stack([loaded.encode_text([t.format(c=name) for t in TEMPLATES]).mean(0) for name in CLASSES])
  classifier /= np.linalg.norm(classifier, axis=1, keepdims=True)
  predictions = (loaded.encode_image(images) @ classifier.T).argmax(1)
  assert metrics['acc1'] == np.mean(predictions == np.array(labels))
  assert metrics['mean_per_class_recall'] == pytest.approx(
      np.mean([np.mean(predictions[np.array(labels) == c] == c) for c in range(len(CLASSES))]), abs=1e-12)


@pytest.mark.slow
def test_command_exits_2_for_a_missing_checkpoint(tmp_path):
  result = _run_command(['eval', '--dataset=wds/set', f'--dataset_root={tmp_path / "set"}',
                         f'--pretrained={tmp_path / "nothing"}', '--num_workers=0'], cwd=tmp_path)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'error: no checkpoint at' in result.stderr and 'Traceback' not in result.stderr
