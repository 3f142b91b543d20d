"""Weights at another shape (models/resize.py, config.init.checkpoint): the position embedding resized to a new grid
and the patch embedding to a new patch size agree with timm's `resample_abs_pos_embed` and `resample_patch_embed`
(torch's antialiased bicubic, the pseudo-inverse resize); the same shape is the identity, bit for bit; a checkpoint at
one image or patch size initialises a model at another, saying what it resized; a width change is refused."""
import copy

import chex
import jax
import numpy as np
import pytest

from support import _import_timm, jit_init
from vlp_jax import interchange, models
from vlp_jax.config import base_config
from vlp_jax.models.resize import resize_patch_kernel, resize_position_embedding, resize_tower
from vlp_jax.models.siglip_vit import SiglipViTTower
from vlp_jax.training.checkpoint import load_pretrained

torch = pytest.importorskip('torch')


def _timm_layers():
  if _import_timm() is None:
    pytest.skip('timm is not installed')
  from timm import layers
  return layers


def _timm_pos(pos, old_grid, new_grid, prefix):
  """Our [prefix + g*g, w] layout through timm's [1, N, w] function."""
  out = _timm_layers().resample_abs_pos_embed(torch.tensor(pos)[None], [new_grid, new_grid], [old_grid, old_grid],
                                              num_prefix_tokens=prefix)
  return out[0].numpy()


def _timm_kernel(kernel, new_patch):
  """Our [p, p, in, out] (flax) kernel through timm's [out, in, p, p] (torch) function."""
  out = _timm_layers().resample_patch_embed(torch.tensor(kernel).permute(3, 2, 0, 1), [new_patch, new_patch])
  return out.permute(2, 3, 1, 0).numpy()


@pytest.mark.parametrize('old_grid,new_grid', [(7, 14), (14, 7), (16, 12), (4, 6)])
@pytest.mark.parametrize('prefix', [0, 1])
def test_position_embedding_resize_is_timms(old_grid, new_grid, prefix):
  pos = np.random.default_rng(old_grid).normal(size=(prefix + old_grid**2, 8)).astype(np.float32)
  got = resize_position_embedding(pos, old_grid, new_grid, prefix)
  assert got.shape == (prefix + new_grid**2, 8) and got.dtype == pos.dtype
  np.testing.assert_allclose(got, _timm_pos(pos, old_grid, new_grid, prefix), atol=1e-4)
  np.testing.assert_array_equal(got[:prefix], pos[:prefix])  # a class token's row is kept
  assert resize_position_embedding(pos, old_grid, old_grid, prefix) is pos  # the identity, bit for bit


@pytest.mark.parametrize('old,new', [(16, 14), (14, 16), (8, 12)])
def test_patch_kernel_resize_is_flexivits_pseudo_inverse_as_timm(old, new):
  kernel = np.random.default_rng(old).normal(size=(old, old, 3, 5)).astype(np.float32)
  got = resize_patch_kernel(kernel, new)
  assert got.shape == (new, new, 3, 5) and got.dtype == kernel.dtype
  np.testing.assert_allclose(got, _timm_kernel(kernel, new), atol=1e-4)
  assert resize_patch_kernel(kernel, old) is kernel
  if new > old:  # upsampling is exact: a patch and its resize give the same token
    patch = np.random.default_rng(1).normal(size=(old, old, 3)).astype(np.float32)
    big = np.asarray(jax.image.resize(patch, (new, new, 3), 'bicubic'))
    np.testing.assert_allclose(np.einsum('hwi,hwio->o', big, got), np.einsum('hwi,hwio->o', patch, kernel),
                               rtol=1e-4, atol=1e-4)


def _model(tower, image_size, patch_size, width=32):
  """A one-block model with the image tower `tower` at the given sizes (fast to initialise)."""
  config = models.preset('tiny', embed_dim=width)
  if tower == 'siglip_vit':
    config.vision = SiglipViTTower.options(image_size, patch_size, width=width, layers=1, heads=2)
  else:
    config.vision.update(image_size=image_size, patch_size=patch_size, width=width, layers=1, heads=2)
  config.text.update(width=32, layers=1, heads=2, context_length=8)
  return config


def _params(config, seed):
  model = models.build_model(config)
  params, _ = jit_init(lambda k: models.init_variables(model, k))(jax.random.key(seed))
  return jax.tree.map(np.asarray, params)


def _save(path, params, model_config):
  config = base_config()
  config.model = model_config
  return interchange.save_checkpoint(path, params, {}, config)


@pytest.mark.slow
@pytest.mark.parametrize('tower,saved_shape,model_shape', [
    ('siglip_vit', (32, 8), (48, 8)),  # a new resolution: the grid 4x4 -> 6x6, no class token
    ('vit', (32, 8), (28, 7)),  # a new patch size (as SigLIP 2's /14 from /16): the kernel 8 -> 7, the grid kept
    ('vit', (32, 8), (32, 4)),  # both: the kernel 8 -> 4, the grid 4x4 -> 8x8 behind a class token
])
def test_a_checkpoint_at_one_shape_initialises_a_model_at_another(tmp_path, capsys, tower, saved_shape, model_shape):
  saved_config, model_config = _model(tower, *saved_shape), _model(tower, *model_shape)
  saved = _params(saved_config, seed=1)
  checkpoint = _save(str(tmp_path / 'ckpt'), saved, saved_config)
  loaded, _, fresh = load_pretrained(checkpoint, _params(model_config, seed=2), {}, model_config)
  assert not fresh
  log = capsys.readouterr().out
  # By hand, with timm's functions: the tower's two resized variables, every other variable as saved.
  prefix = 1 if tower == 'vit' else 0
  old_grid, new_grid = saved_shape[0] // saved_shape[1], model_shape[0] // model_shape[1]
  by_hand = copy.deepcopy(saved)
  by_hand['visual']['positional_embedding'] = (
      _timm_pos(saved['visual']['positional_embedding'], old_grid, new_grid, prefix) if old_grid != new_grid
      else saved['visual']['positional_embedding'])
  by_hand['visual']['conv1']['kernel'] = _timm_kernel(saved['visual']['conv1']['kernel'], model_shape[1])
  chex.assert_trees_all_close(loaded, by_hand, atol=1e-4)
  rest = lambda p: {k: v for k, v in p['visual'].items() if k not in ('positional_embedding', 'conv1')}  # noqa
  chex.assert_trees_all_equal(rest(loaded), rest(saved))
  chex.assert_trees_all_equal({k: v for k, v in loaded.items() if k != 'visual'},
                              {k: v for k, v in saved.items() if k != 'visual'})
  model = models.build_model(model_config)
  images = jax.random.normal(jax.random.key(3), (2, model_shape[0], model_shape[0], 3))
  encode = lambda p: model.apply({'params': p}, images, False, True, method=model.encode_image)  # noqa: E731
  chex.assert_trees_all_close(encode(loaded), encode(by_hand), atol=1e-4)
  if model_shape[1] != saved_shape[1]:
    assert f'Resized visual/conv1/kernel ({saved_shape[1]}, {saved_shape[1]}, 3, 32) -> ' in log
    assert f'(patch {saved_shape[1]} -> {model_shape[1]}, pseudo-inverse resize)' in log
  if old_grid != new_grid:
    assert f'(grid {old_grid}x{old_grid} -> {new_grid}x{new_grid}, bicubic)' in log


@pytest.mark.slow
def test_the_same_shape_loads_bit_for_bit_and_a_width_change_is_refused(tmp_path, capsys):
  config = _model('siglip_vit', 32, 8)
  saved = _params(config, seed=1)
  checkpoint = _save(str(tmp_path / 'ckpt'), saved, config)
  loaded, _, _ = load_pretrained(checkpoint, _params(config, seed=2), {}, config)
  chex.assert_trees_all_equal(loaded, saved)
  assert 'Resized' not in capsys.readouterr().out
  wider = _model('siglip_vit', 48, 8, width=64)  # a new size, but the width has no resize: nothing is resized
  with pytest.raises(ValueError, match=r'visual/positional_embedding: checkpoint \(16, 32\), model \(36, 64\).*'
                                       r'no resize is defined for config.model.vision.width \(checkpoint 32, model 64\)'):
    load_pretrained(checkpoint, _params(wider, seed=2), {}, wider)
  deeper = _model('siglip_vit', 32, 8)
  deeper.vision.layers = 2  # fits (the second block would be fresh), but no resize is defined for a depth change
  with pytest.raises(ValueError, match=r'no resize is defined for config.model.vision.layers \(checkpoint 1, model 2\)'):
    load_pretrained(checkpoint, _params(deeper, seed=2), {}, deeper)
  with pytest.raises(ValueError, match=r"config.model.vision.type='resnet' defines no resize for "
                                       r'config.model.vision.image_size \(checkpoint 32, model 48\)'):
    resize_tower({}, {'type': 'resnet', 'image_size': 32, 'patch_size': 32},
                 {'type': 'resnet', 'image_size': 48, 'patch_size': 32}, prefix=None)
