"""vlp_jax.load: from any checkpoint to embeddings equal to `python -m vlp_jax.embed`'s, for uint8 and float arrays
and PIL images (preprocessed as the eval pipeline does), with the model's tokenizer and clear errors."""
import io

import jax
import numpy as np
import pytest
from PIL import Image

import vlp_jax
from vlp_jax import models
from vlp_jax import interchange as weights
from vlp_jax.cli import embed_command
from vlp_jax.data.image import image_ops
from vlp_jax.data.storage import records
from vlp_jax.data.text.clip_bpe import default_tokenizer

from support import micro_config

# Each test here needs a trained checkpoint (module fixtures): the quick loop leaves them out.
pytestmark = pytest.mark.slow

CAPTIONS = ['a red circle', 'a drawing of a blue star', '', 'two green triangles ' * 10]
FLOAT_TOLERANCE = dict(rtol=0, atol=1e-6)  # float32: the same encoder, possibly another chunk size


@pytest.fixture(scope='module')
def workdir(tmp_path_factory, data_cache):
  """A workdir laid out as training writes it, with two checkpoint steps of the micro model (random weights)."""
  config = micro_config(data_cache)
  model = models.build_model(config.model)
  root = tmp_path_factory.mktemp('load')
  for step, seed in ((3, 1), (6, 2)):
    params, state = jax.jit(lambda rng: models.init_variables(model, rng))(jax.random.key(seed))
    weights.save_checkpoint(str(root / 'run' / 'checkpoints' / str(step)), jax.tree.map(np.asarray, params), state,
                            config)
  return root / 'run'


@pytest.fixture(scope='module')
def loaded(workdir):
  return vlp_jax.load(str(workdir))


def _png(pixels: np.ndarray, mode: str) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(pixels).convert(mode).save(buffer, format='PNG')
  return buffer.getvalue()


def _eval_pipeline(encoded: bytes, image_size: int) -> np.ndarray:
  """What the eval sets do with an encoded image (evalsets/synthetic.py): decode, resize and crop, normalise."""
  return image_ops.normalize_image(image_ops.resize_image(records.decode_image(encoded), image_size))


def _embed_cli(checkpoint, tmp_path, name, pixels=None, texts=None) -> dict:
  """Embeddings through `python -m vlp_jax.embed`'s function, from files as the command reads them."""
  args = {}
  if pixels is not None:
    np.save(tmp_path / f'{name}.npy', pixels)
    args['pixels'] = str(tmp_path / f'{name}.npy')
  if texts is not None:
    (tmp_path / f'{name}.txt').write_text('\n'.join(texts) + '\n')
    args['texts'] = str(tmp_path / f'{name}.txt')
  return embed_command.run(str(checkpoint), str(tmp_path / f'{name}.npz'), **args)


def test_image_embeddings_equal_embeds_for_pil_uint8_and_float(loaded, workdir, tmp_path):
  rng = np.random.default_rng(0)
  raw = rng.integers(0, 256, size=(3, 24, 20, 3), dtype=np.uint8)  # not square, not the model's 16px
  modes = ('RGB', 'RGBA', 'L')
  encoded = [_png(image, mode) for image, mode in zip(raw, modes)]
  want_pixels = np.stack([_eval_pipeline(e, loaded.image_size) for e in encoded])
  want = _embed_cli(workdir, tmp_path, 'images', pixels=want_pixels)['image_embeddings']
  assert want.shape == (3, 32)

  pil_images = [Image.open(io.BytesIO(e)) for e in encoded]
  assert [image.mode for image in pil_images] == list(modes)
  np.testing.assert_allclose(loaded.encode_image(pil_images), want, **FLOAT_TOLERANCE)
  np.testing.assert_allclose(loaded.encode_image(want_pixels), want, **FLOAT_TOLERANCE)  # float: used as given
  np.testing.assert_allclose(loaded.encode_image(want_pixels[1]), want[1:2], **FLOAT_TOLERANCE)
  np.testing.assert_allclose(loaded.encode_image(pil_images[2]), want[2:3], **FLOAT_TOLERANCE)
  # uint8 arrays are RGB pixels: the same as their RGB PNG.
  rgb_want = _embed_cli(workdir, tmp_path, 'rgb', pixels=np.stack(
      [_eval_pipeline(_png(image, 'RGB'), loaded.image_size) for image in raw]))['image_embeddings']
  np.testing.assert_allclose(loaded.encode_image(raw), rgb_want, **FLOAT_TOLERANCE)
  np.testing.assert_allclose(loaded.encode_image(list(raw)), rgb_want, **FLOAT_TOLERANCE)
  np.testing.assert_allclose(np.linalg.norm(loaded.encode_image(raw), axis=1), 1.0, rtol=1e-5)


def test_text_embeddings_and_tokens_equal_embeds(loaded, workdir, tmp_path):
  want = _embed_cli(workdir, tmp_path, 'texts', texts=CAPTIONS)['text_embeddings']
  got = loaded.encode_text(CAPTIONS)
  assert got.dtype == np.float32 and got.shape == (4, 32)
  np.testing.assert_allclose(got, want, **FLOAT_TOLERANCE)
  np.testing.assert_allclose(loaded.encode_text(CAPTIONS[1]), want[1:2], **FLOAT_TOLERANCE)
  np.testing.assert_allclose(vlp_jax.load(str(workdir), batch_size=2).encode_text(CAPTIONS), want,
                             **FLOAT_TOLERANCE)  # in chunks of 2 rows (rounded up to the device count)
  tokens = loaded.tokenize(CAPTIONS)
  assert tokens.dtype == np.int32 and tokens.shape == (4, 16)
  np.testing.assert_array_equal(tokens, default_tokenizer()(CAPTIONS, context_length=16))
  assert loaded.tokenize('a red circle').shape == (1, 16)
  assert loaded.encode_text([]).shape == (0, 32) and loaded.encode_image([]).shape == (0, 32)


def test_preprocess_is_the_eval_pipeline(loaded):
  raw = np.random.default_rng(1).integers(0, 256, size=(30, 18, 3), dtype=np.uint8)
  want = _eval_pipeline(_png(raw, 'RGB'), 16)
  for image in (raw, Image.fromarray(raw)):
    got = loaded.preprocess(image)
    assert got.dtype == np.float32 and got.shape == (16, 16, 3)
    np.testing.assert_array_equal(got, want)


def test_workdir_step_directory_and_imported_checkpoint(loaded, workdir):
  assert loaded.checkpoint == str(workdir / 'checkpoints' / '6')  # a workdir opens its latest step
  first = vlp_jax.load(str(workdir / 'checkpoints' / '3'))
  assert first.checkpoint == str(workdir / 'checkpoints' / '3')
  # An imported checkpoint is a bare step directory; steps 3 and 6 hold different weights.
  assert np.abs(first.encode_text('a red circle') - loaded.encode_text('a red circle')).max() > 1e-3
  assert repr(loaded).startswith('LoadedModel(tiny')


def test_bad_path_and_bad_inputs_are_named(loaded, tmp_path):
  missing = tmp_path / 'no_such_run'
  with pytest.raises(FileNotFoundError, match=f'no checkpoint at {missing}'):
    vlp_jax.load(str(missing))
  with pytest.raises(ValueError, match=r'shape \(2, 3, 16, 16\).*channels last'):
    loaded.encode_image(np.zeros((2, 3, 16, 16), np.float32))
  with pytest.raises(ValueError, match='multiples of 4'):
    loaded.encode_image(np.zeros((2, 14, 14, 3), np.float32))
  with pytest.raises(ValueError, match='different shapes'):
    loaded.encode_image([np.zeros((16, 16, 3), np.float32), np.zeros((32, 32, 3), np.float32)])
  with pytest.raises(TypeError, match='got a str'):
    loaded.encode_image('cat.jpg')
  with pytest.raises(TypeError, match='uint8 array, got an array of shape .* dtype int64'):
    loaded.preprocess(np.zeros((16, 16, 3), np.int64))
  with pytest.raises(TypeError, match='a string or a list of strings'):
    loaded.encode_text([1, 2])

