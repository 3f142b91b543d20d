"""The embed CLI (contract), dataset-split embedding, and continue pre-training from an imported checkpoint."""
import os
import subprocess
import sys

import jax
import numpy as np
from PIL import Image
import pytest

from support import FAST_COMPILE_XLA_FLAGS, ROOT
from vlp_jax import models
from vlp_jax import interchange as weights
from vlp_jax.cli import embed_command
from vlp_jax.data import formats
from vlp_jax.data.loading import pipeline
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.training.loop import train_and_evaluate

# Each test here needs a trained checkpoint (module fixtures): the quick loop leaves them out.
pytestmark = pytest.mark.slow


@pytest.fixture
def checkpoint(micro, tmp_path):
  """An 'imported' checkpoint of the micro model with random weights."""
  params, state = models.init_variables(models.build_model(micro.model), jax.random.key(5))
  return weights.save_checkpoint(str(tmp_path / 'ckpt'), jax.tree.map(np.asarray, params), state, micro), params


def test_embed_pixels_and_texts_match_the_model(micro, checkpoint, tmp_path):
  path, params = checkpoint
  pixels = np.random.default_rng(0).normal(size=(5, 16, 16, 3)).astype(np.float32)
  np.save(tmp_path / 'x.npy', pixels)
  captions = ['a red circle', 'a drawing of a blue star', '']
  (tmp_path / 't.txt').write_text('\n'.join(captions) + '\n')
  out = str(tmp_path / 'out.npz')
  embed_command.run(path, out, pixels=str(tmp_path / 'x.npy'), texts=str(tmp_path / 't.txt'), batch_size=16)
  result = np.load(out)
  assert result['image_embeddings'].dtype == np.float32 and result['image_embeddings'].shape == (5, 32)
  assert result['text_embeddings'].shape == (3, 32)
  np.testing.assert_allclose(np.linalg.norm(result['image_embeddings'], axis=1), 1.0, rtol=1e-5)
  model = models.build_model(micro.model)
  want = np.asarray(model.apply({'params': params}, pixels, method=model.encode_image)['embed'])
  np.testing.assert_allclose(result['image_embeddings'], want / np.linalg.norm(want, axis=1, keepdims=True),
                             atol=1e-5)
  tokens = default_tokenizer()(captions, context_length=16)
  want = np.asarray(model.apply({'params': params}, tokens, method=model.encode_text)['embed'])
  np.testing.assert_allclose(result['text_embeddings'], want / np.linalg.norm(want, axis=1, keepdims=True),
                             atol=1e-5)


def test_embed_dataset_split_is_keyed_and_ordered(micro, checkpoint, tmp_path):
  out = str(tmp_path / 'split.npz')
  result = embed_command.run(checkpoint[0], out, dataset='synthetic', split='test', batch_size=16)
  examples = pipeline.read_all(formats.split_paths(micro.data, 'test'))
  assert list(np.load(out)['keys']) == [e['key'] for e in examples]
  assert result['image_embeddings'].shape == (len(examples), 32) == result['text_embeddings'].shape


@pytest.mark.parametrize('pixels,message', [
    (np.zeros((2, 16, 16, 3), np.uint8), 'dtype uint8'),
    (np.zeros((2, 3, 16, 16), np.float32), r'\[N, H, W, 3\]'),
    (np.zeros((2, 14, 14, 3), np.float32), 'multiples of 4'),
])
def test_embed_rejects_bad_pixels(checkpoint, tmp_path, pixels, message):
  np.save(tmp_path / 'x.npy', pixels)
  with pytest.raises(embed_command.EmbedError, match=message):
    embed_command.run(checkpoint[0], str(tmp_path / 'o.npz'), pixels=str(tmp_path / 'x.npy'))


def _write_images(folder):
  """Three images of other sizes than the model's: a wide JPEG, a tall PNG and a greyscale PNG."""
  rng = np.random.default_rng(1)
  folder.mkdir()
  Image.fromarray(rng.integers(0, 256, (23, 40, 3), np.uint8)).save(folder / 'a.jpg', quality=90)
  Image.fromarray(rng.integers(0, 256, (50, 33, 3), np.uint8)).save(folder / 'b.png')
  Image.fromarray(rng.integers(0, 256, (30, 30), np.uint8)).save(folder / 'c.png')
  (folder / 'notes.md').write_text('not an image')  # skipped: a folder contributes its image files only
  return [str(folder / name) for name in ('a.jpg', 'b.png', 'c.png')]


def _preprocessed_by_hand(path, size):
  """[size, size, 3]: RGB, bicubic resize of the shorter side to `size` (the longer one truncated, as torchvision
  and transformers do), centre crop, /255, OpenAI CLIP's mean and std."""
  image = Image.open(path).convert('RGB')
  width, height = image.size
  short = min(width, height)
  image = image.resize((int(size * width / short), int(size * height / short)), Image.Resampling.BICUBIC)
  left, top = (image.width - size) // 2, (image.height - size) // 2
  pixels = np.asarray(image.crop((left, top, left + size, top + size)), np.float32) / 255
  return (pixels - np.array([0.48145466, 0.4578275, 0.40821073])) / np.array([0.26862954, 0.26130258, 0.27577711])


def test_embed_image_files_as_the_evaluation_preprocesses_them(checkpoint, tmp_path):
  paths = _write_images(tmp_path / 'images')
  np.save(tmp_path / 'by_hand.npy', np.stack([_preprocessed_by_hand(p, 16) for p in paths]).astype(np.float32))
  want = embed_command.run(checkpoint[0], str(tmp_path / 'npy.npz'), pixels=str(tmp_path / 'by_hand.npy'))
  (tmp_path / 'list.txt').write_text('images/a.jpg\n\nimages/b.png\n' + paths[2] + '\n')  # relative and absolute
  for spec in ('images', 'images/*.*g', 'list.txt'):
    got = embed_command.run(checkpoint[0], str(tmp_path / 'files.npz'), pixels=str(tmp_path / spec), overwrite=True)
    assert list(got['image_files']) == paths, spec
    np.testing.assert_allclose(got['image_embeddings'], want['image_embeddings'], atol=1e-5, err_msg=spec)
  assert list(np.load(tmp_path / 'files.npz')['image_files']) == paths
  one = embed_command.run(checkpoint[0], str(tmp_path / 'one.npz'), pixels=paths[1])
  np.testing.assert_allclose(one['image_embeddings'], want['image_embeddings'][1:2], atol=1e-5)


def test_embed_image_files_errors_name_the_file(checkpoint, tmp_path):
  (tmp_path / 'empty').mkdir()
  with pytest.raises(embed_command.EmbedError, match='folder without image files'):
    embed_command.image_files(str(tmp_path / 'empty'))
  (tmp_path / 'list.txt').write_text('missing.png\n')
  with pytest.raises(FileNotFoundError, match='lists 1 files that do not exist, e.g. .*missing.png'):
    embed_command.image_files(str(tmp_path / 'list.txt'))
  with pytest.raises(FileNotFoundError, match='matches no file'):
    embed_command.image_files(str(tmp_path / '*.jpg'))
  (tmp_path / 'broken.jpg').write_bytes(b'not a jpeg')
  with pytest.raises(embed_command.EmbedError, match='broken.jpg is not a readable image'):
    embed_command.run(checkpoint[0], str(tmp_path / 'o.npz'), pixels=str(tmp_path / 'broken.jpg'))
  assert not (tmp_path / 'o.npz').exists()


def test_embed_never_overwrites_silently(checkpoint, tmp_path):
  (tmp_path / 't.txt').write_text('a cat\n')
  out = tmp_path / 'o.npz'
  out.write_bytes(b'precious')
  with pytest.raises(embed_command.EmbedError, match='exists'):
    embed_command.run(checkpoint[0], str(out), texts=str(tmp_path / 't.txt'))
  assert out.read_bytes() == b'precious'
  with pytest.raises(embed_command.EmbedError, match='nothing to embed'):
    embed_command.run(checkpoint[0], str(tmp_path / 'p.npz'))


def test_continue_pretraining_starts_from_the_checkpoint(micro, checkpoint, tmp_path):
  path, imported = checkpoint
  micro.init.checkpoint = path
  micro.total_steps = 1
  micro.optim.update(lr=1e-9, warmup_init_lr=1e-9, warmup_steps=0, schedule='constant')
  result = train_and_evaluate(micro, str(tmp_path / 'run'))
  trained = jax.tree.map(np.asarray, result['state'].params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), trained, jax.tree.map(np.asarray, imported))
  # A different seed's fresh init is far from it: the towers really came from the checkpoint.
  fresh, _ = models.init_variables(models.build_model(micro.model), jax.random.key(0))
  assert np.abs(np.asarray(fresh['visual']['proj']) - trained['visual']['proj']).max() > 1e-2


def test_continue_pretraining_rejects_a_mismatched_model(micro, checkpoint, tmp_path):
  micro.init.checkpoint = checkpoint[0]
  micro.model.act = 'quick_gelu'
  with pytest.raises(ValueError, match="act='gelu'"):
    train_and_evaluate(micro, str(tmp_path / 'a'))
  micro.model.act = 'gelu'
  micro.model.text.width = 64
  with pytest.raises(ValueError, match='does not fit config.model'):
    train_and_evaluate(micro, str(tmp_path / 'b'))


def test_embed_cli_contract(checkpoint, tmp_path):
  root = ROOT
  (tmp_path / 't.txt').write_text('a red circle\na blue star\n')
  np.save(tmp_path / 'x.npy', np.zeros((3, 16, 16, 3), np.float32))
  out = tmp_path / 'cli.npz'
  env = {**os.environ, 'PYTHONPATH': root}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS
  result = subprocess.run([sys.executable, '-m', 'vlp_jax.embed', f'--checkpoint={checkpoint[0]}',
                           f'--pixels={tmp_path / "x.npy"}', f'--texts={tmp_path / "t.txt"}', f'--output={out}'],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  arrays = np.load(out)
  assert arrays['image_embeddings'].shape == (3, 32) and arrays['text_embeddings'].shape == (2, 32)
  again = subprocess.run([sys.executable, '-m', 'vlp_jax.embed', f'--checkpoint={checkpoint[0]}',
                          f'--texts={tmp_path / "t.txt"}', f'--output={out}'], cwd=root, env=env,
                         capture_output=True, text=True, timeout=300)
  assert again.returncode == 2 and 'exists' in again.stderr
