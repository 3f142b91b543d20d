"""NaFlex in the SigLIP image tower (models/naflex_inputs.py, models/siglip_vit.py): a NaFlex image on the fixed grid
gives the fixed tower's output, padding changes nothing on any attention route that takes lengths, the
position-embedding resize is torch's antialiased bilinear F.interpolate, the matmul patch embedding equals the conv,
and the config keys are checked."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vlp_jax import config as config_lib
from vlp_jax import models
from vlp_jax.errors import ConfigError
from vlp_jax.models.naflex_inputs import NaflexImages, patchify, resized_position_embedding
from vlp_jax.models.transformer import stacked_layout, unstacked_layout

PATCH, GRID, WIDTH = 4, 4, 32


def _config(attention='auto', patch_embedding='conv', tower='siglip_vit', scan=False):
  preset = 'ViT-B-16-SigLIP' if tower == 'siglip_vit' else 'ViT-B-32'
  config = models.preset(preset, embed_dim=WIDTH, attention=attention, scan_layers=scan)
  config.vision.update(image_size=GRID * PATCH, patch_size=PATCH, width=WIDTH, layers=2, heads=4, mlp_width=40,
                       patch_embedding=patch_embedding)
  config.text.update(context_length=8, width=WIDTH, layers=1, heads=4, vocab_size=50, mlp_width=40)
  return config


def _init(config):
  return jax.jit(lambda: models.init_variables(models.build_model(config), jax.random.key(0))[0])()


def _params(config, init=None):
  params = _init(config) if init is None else init
  rng = np.random.default_rng(1)  # non-trivial values everywhere (biases and LayerNorm shifts start at zero)
  return jax.tree.map(lambda x: np.asarray(x) + np.float32(0.05) * rng.standard_normal(x.shape, np.float32), params)


def _embed(config, params, images):
  model = models.build_model(config)
  return jax.jit(lambda p, x: model.apply({'params': p}, x, method=model.encode_image))(params, images)


def _naflex(images_by_shape, length, rng, padding='zeros'):
  """[(rows, cols)] -> NaflexImages of random patches, the padding zeros or random."""
  patches = np.zeros((len(images_by_shape), length, PATCH * PATCH * 3), np.float32)
  noise = np.random.default_rng(99)  # its own generator: the real patches are the same either way
  for i, (rows, cols) in enumerate(images_by_shape):
    patches[i, :rows * cols] = rng.normal(size=(rows * cols, PATCH * PATCH * 3))
    if padding == 'random':
      patches[i, rows * cols:] = noise.normal(size=(length - rows * cols, PATCH * PATCH * 3)) * 5
  return NaflexImages(patches, np.array(images_by_shape, np.int32))


def test_naflex_images_on_the_fixed_grid_and_the_matmul_embedding_give_the_conv_towers_output():
  conv, matmul = _config(), _config(patch_embedding='matmul')
  init = _init(conv)
  chex.assert_trees_all_equal(_init(matmul), init)  # the same parameters, initialised alike
  params = _params(conv, init)
  # Two rows past the last whole patch: the conv drops them, and so do patchify and the matmul.
  images = np.random.default_rng(0).normal(size=(2, GRID * PATCH + 2, GRID * PATCH, 3)).astype(np.float32)
  fixed = _embed(conv, params, images)
  chex.assert_trees_all_close(_embed(matmul, params, images), fixed, atol=1e-5, rtol=1e-5)
  naflex = NaflexImages(np.asarray(patchify(images, PATCH)), np.full((2, 2), GRID, np.int32))
  chex.assert_trees_all_close(_embed(conv, params, naflex), fixed, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('attention, scan', [('xla', False), pytest.param('padded', True, marks=pytest.mark.slow)])
def test_padding_rows_change_nothing(attention, scan):
  config = _config(attention, scan=scan)
  config.remat = scan  # the scanned variant rematerialised too: the lengths pass through both transforms
  params = _params(_config())
  if scan:
    params = stacked_layout(params)
  shapes, length = [(1, 5), (3, 2), (2, 7)], 19  # padding after 5, 6 and 14 real patches
  zeros = _naflex(shapes, length, np.random.default_rng(0))
  noisy = _naflex(shapes, length, np.random.default_rng(0), padding='random')
  assert not np.array_equal(zeros.patches, noisy.patches)
  out_zeros, out_noisy = _embed(config, params, zeros), _embed(config, params, noisy)
  chex.assert_trees_all_close(out_noisy['embed'], out_zeros['embed'], atol=1e-5, rtol=1e-5)
  for i, (rows, cols) in enumerate(shapes):
    chex.assert_trees_all_close(out_noisy['tokens'][i, :rows * cols], out_zeros['tokens'][i, :rows * cols],
                                atol=1e-5, rtol=1e-5)
  # The same image alone, with no padding at all, embeds the same.
  alone = _embed(config, params, NaflexImages(zeros.patches[2:, :14], zeros.spatial_shapes[2:]))
  chex.assert_trees_all_close(alone['embed'][0], out_zeros['embed'][2], atol=1e-5, rtol=1e-5)
  if scan:  # the scanned, rematerialised blocks with lengths give the unrolled 'xla' tower's output
    unrolled = _embed(_config('xla'), unstacked_layout(params), zeros)
    chex.assert_trees_all_close(out_zeros['embed'], unrolled['embed'], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('shape', [(1, 16), (16, 1), (7, 37), (16, 16), (5, 9), (24, 3)])
def test_position_embedding_resize_equals_torch_antialiased_bilinear(shape):
  grid, width = 16, 6
  embedding = np.random.default_rng(0).normal(size=(grid, grid, width)).astype(np.float32)
  rows, cols = shape
  length = rows * cols + 3
  ours = resized_position_embedding(jnp.asarray(embedding), jnp.array([shape], jnp.int32), length)
  reference = torch.nn.functional.interpolate(torch.from_numpy(embedding).permute(2, 0, 1)[None], size=shape,
                                              mode='bilinear', align_corners=False, antialias=True)
  reference = reference[0].permute(1, 2, 0).reshape(rows * cols, width).numpy()
  np.testing.assert_allclose(np.asarray(ours)[0, :rows * cols], reference, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_matmul_patch_embedding_equals_the_conv_in_the_vit():
  conv, matmul = _config(tower='vit'), _config(tower='vit', patch_embedding='matmul')
  init = _init(conv)
  chex.assert_trees_all_equal(_init(matmul), init)  # the same parameters (no bias), initialised alike
  params = _params(conv, init)
  images = np.random.default_rng(0).normal(size=(2, GRID * PATCH + 2, GRID * PATCH, 3)).astype(np.float32)
  chex.assert_trees_all_close(_embed(matmul, params, images), _embed(conv, params, images), atol=1e-5, rtol=1e-5)


def test_naflex_refuses_pallas_and_patch_dropout_at_trace_time():
  config = _config('pallas')
  params = _params(config)
  images = _naflex([(2, 2)], 6, np.random.default_rng(0))
  with pytest.raises(ConfigError, match="attention='pallas'"):
    _embed(config, params, images)
  config = _config()
  config.vision.patch_dropout = 0.5
  model = models.build_model(config)
  with pytest.raises(ConfigError, match='patch_dropout'):
    model.apply({'params': params}, images, True, True, jax.random.split(jax.random.key(0), 1),
                method=model.encode_image)


def _full_config(**vision):
  config = config_lib.base_config()  # its text tower (no tokenizer file needed), SigLIP's image tower
  siglip = models.preset('ViT-B-16-SigLIP')
  config.model.vision, config.model.embed_dim = siglip.vision, siglip.embed_dim
  config.model.vision.update(vision)
  return config


@pytest.mark.parametrize('vision, message', [
    (dict(patch_embedding='linear'), r"config\.model\.vision\.patch_embedding='linear' is not valid; valid choices: "
                                     r"\['conv', 'matmul'\]"),
    (dict(max_patches=0), r'config\.model\.vision\.max_patches=0 must be a positive integer'),
    (dict(naflex=True, patch_dropout=0.5), r'config\.model\.vision\.patch_dropout=0\.5 does not apply with '
                                           r'config\.model\.vision\.naflex=True'),
])
def test_naflex_config_keys_are_checked(vision, message):
  with pytest.raises(ConfigError, match=message):
    config_lib.validate(_full_config(**vision), num_devices=8)


def test_naflex_with_pallas_is_a_config_error_and_valid_keys_pass():
  config = _full_config(naflex=True, max_patches=64)
  config_lib.validate(config, num_devices=8)
  config.model.attention = 'pallas'
  with pytest.raises(ConfigError, match=r"config\.model\.attention='pallas'.*valid choices with NaFlex"):
    config_lib.validate(config, num_devices=8)
  config = config_lib.base_config()
  config.model.vision.patch_embedding = 'matmul'
  config_lib.validate(config, num_devices=8)
  config.model.vision.patch_embedding = 'dense'
  with pytest.raises(ConfigError, match=r'patch_embedding.*valid choices'):
    config_lib.validate(config, num_devices=8)


def test_the_patch_embedding_option_belongs_to_every_tower_and_matmul_to_patch_based_ones_only(micro):
  """A config switched from a ViT to a ResNet keeps the key (every tower knows it, as patch_dropout); 'matmul' is
  refused on a tower without patches, naming the key."""
  micro.model.vision.update(type='resnet', stages=(1, 1, 1, 1), width=8, heads=2, image_size=32)
  config_lib.validate(micro)
  micro.model.vision.patch_embedding = 'matmul'
  with pytest.raises(ConfigError, match=r"config\.model\.vision\.patch_embedding='matmul' applies to patch-based"):
    config_lib.validate(micro)
