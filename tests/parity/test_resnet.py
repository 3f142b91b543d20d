"""ModifiedResNet (RN50 image tower): shapes, positional-embedding interpolation, BatchNorm state, and parity with
open_clip's PyTorch ModifiedResNet under the same weights."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import import_open_clip_module
from vlp_jax.models.resnet import ModifiedResNet

SMALL = dict(stages=(1, 1, 1, 1), width=8, heads=2, output_dim=16, image_size=64)


@pytest.fixture(scope='module')
def small():
  model = ModifiedResNet(**SMALL)
  images = jax.random.normal(jax.random.key(1), (2, 64, 64, 3))
  # An rbg key: its init compiles several times faster on CPU than threefry's.
  return model, jax.jit(model.init)(jax.random.key(0, impl='rbg'), images), images


@pytest.mark.slow
def test_output_shapes_and_layout(small):
  model, variables, images = small
  out = jax.jit(model.apply)(variables, images)
  assert out['embed'].shape == out['cls'].shape == (2, 16)
  np.testing.assert_array_equal(out['cls'], out['embed'])
  assert out['tokens'].shape == (2, 2 * 2, 8 * 32)  # 64 // 32 = 2; feature width 32 * width
  params = variables['params']
  assert params['attnpool']['positional_embedding'].shape == (2 * 2 + 1, 256)
  assert params['attnpool']['c_proj']['kernel'].shape == (256, 16)
  assert 'downsample_0' in params['layer1_0']  # inplanes 8 != 4 * 8
  assert 'bias' not in params['conv1'] and 'bias' not in params['layer2_0']['conv2']
  assert set(variables['batch_stats']['layer3_0']['downsample_1']) == {'mean', 'var'}
  # OpenAI's init: residual branches start at zero through bn3 (the stem's bn3 is not zeroed).
  assert not np.any(params['layer4_0']['bn3']['scale']) and np.all(params['bn3']['scale'] == 1)


@pytest.mark.slow
def test_other_resolution_interpolates_positional_embedding(small):
  model, variables, _ = small
  out = jax.jit(model.apply)(variables, jax.random.normal(jax.random.key(2), (3, 96, 96, 3)))
  assert out['embed'].shape == (3, 16)
  assert out['tokens'].shape == (3, 3 * 3, 256)
  assert np.all(np.isfinite(out['embed']))


@pytest.mark.slow
def test_train_updates_batch_stats_and_eval_does_not(small):
  model, variables, images = small
  train_apply = jax.jit(functools.partial(model.apply, train=True, mutable=['batch_stats']))
  eval_apply = jax.jit(functools.partial(model.apply, train=False, mutable=['batch_stats']))
  train_out, updated = train_apply(variables, images)
  before = jax.tree.leaves(variables['batch_stats'])
  after = jax.tree.leaves(updated['batch_stats'])
  assert len(before) == len(after) == 2 * (3 + 4 * 3 + 4)  # mean and var of every BatchNorm
  assert all(not np.allclose(a, b) for a, b in zip(before, after))
  eval_out, unchanged = eval_apply(variables, images)
  jax.tree.map(np.testing.assert_array_equal, unchanged['batch_stats'], variables['batch_stats'])
  # Batch statistics differ from the (initial) running averages, so the two modes give different features.
  assert np.abs(train_out['tokens'] - eval_out['tokens']).max() > 1e-3


# --- parity with open_clip --------------------------------------------------------------------------------------


def torch_to_flax(state_dict) -> dict:
  """A torch state dict -> Flax {'params', 'batch_stats'} by the generic OpenAI-name rule.

  Numeric key components join the previous one with '_' ('layer1.0.downsample.1' -> 'layer1_0/downsample_1');
  conv weight [O, I, kh, kw] -> kernel [kh, kw, I, O]; linear weight [out, in] -> kernel [in, out]; BatchNorm
  weight -> scale, running_mean / running_var -> batch_stats mean / var.
  """
  variables = {'params': {}, 'batch_stats': {}}
  for key, tensor in state_dict.items():
    *path, leaf = _join_indices(key.split('.'))
    value = tensor.detach().cpu().numpy()
    if leaf == 'num_batches_tracked':
      continue
    collection = 'params'
    if leaf in ('running_mean', 'running_var'):
      collection, leaf = 'batch_stats', leaf.removeprefix('running_')
    elif leaf == 'weight' and value.ndim == 4:
      leaf, value = 'kernel', value.transpose(2, 3, 1, 0)
    elif leaf == 'weight' and value.ndim == 2:
      leaf, value = 'kernel', value.T
    elif leaf == 'weight':
      leaf = 'scale'
    node = variables[collection]
    for name in path:
      node = node.setdefault(name, {})
    node[leaf] = jnp.asarray(value)
  return variables


def _join_indices(parts: list[str]) -> list[str]:
  out = []
  for part in parts:
    if part.isdigit():
      out[-1] = f'{out[-1]}_{part}'
    else:
      out.append(part)
  return out


def _randomise_batch_norms(module, images, torch) -> None:
  """Non-trivial eval-mode BatchNorm: random affine parameters (bn3 included: OpenAI zero-initialises it) and
  running statistics near those of `images`, perturbed.

  Purely random running statistics let the BN offsets swamp the signal through 16 blocks (two random images then
  give embeddings with cosine 0.99999, which would hide errors in early layers); calibrating keeps the output
  input-dependent.
  """
  norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
  with torch.no_grad():
    for m in norms:
      m.reset_running_stats()
      m.momentum = None  # cumulative average: one train-mode pass sets the running stats to the batch's
      m.weight.uniform_(0.5, 1.5)
      m.bias.normal_(0.0, 0.1)
    module.train()
    module(images)
    module.eval()
    for m in norms:
      m.running_mean.add_(0.1 * m.running_var.sqrt() * torch.randn_like(m.running_mean))
      m.running_var.mul_(torch.empty_like(m.running_var).uniform_(0.5, 1.5))


def _normalise(x: np.ndarray) -> np.ndarray:
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize('config', [
    dict(layers=(2, 1, 1, 2), width=8, heads=2, output_dim=16, image_size=64),
    dict(layers=(3, 4, 6, 3), width=64, heads=32, output_dim=1024, image_size=224),  # RN50
], ids=['small', 'RN50'])
@pytest.mark.slow
def test_parity_with_open_clip(config):
  torch = pytest.importorskip('torch', reason='torch is needed for the open_clip parity test')
  reference_module = import_open_clip_module('modified_resnet')

  size = config['image_size']
  images = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
  torch.manual_seed(0)
  reference = reference_module.ModifiedResNet(**config).eval()
  _randomise_batch_norms(reference, torch.from_numpy(images), torch)
  variables = torch_to_flax(reference.state_dict())
  model = ModifiedResNet(stages=config['layers'], width=config['width'], heads=config['heads'],
                         output_dim=config['output_dim'], image_size=config['image_size'])
  expected_shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, size, size, 3)))
  assert jax.tree.map(lambda x: x.shape, variables) == jax.tree.map(lambda x: x.shape, dict(expected_shapes))

  with torch.no_grad():
    x = torch.from_numpy(images)
    features = reference.layer4(reference.layer3(reference.layer2(reference.layer1(reference.stem(x)))))
    expected_embed = reference.attnpool(features).numpy()
    expected_tokens = features.flatten(2).transpose(1, 2).numpy()  # NCHW -> [B, HW, C]
  out = jax.jit(model.apply)(variables, jnp.asarray(images.transpose(0, 2, 3, 1)))

  token_error = np.abs(np.asarray(out['tokens']) - expected_tokens).max() / np.abs(expected_tokens).max()
  embed_error = np.abs(_normalise(np.asarray(out['embed'])) - _normalise(expected_embed)).max()
  assert np.abs(_normalise(expected_embed[0]) - _normalise(expected_embed[1])).max() > 1e-3  # input-dependent
  print(f'\nparity {config}: max abs error of L2-normalised embed {embed_error:.2e}, '
        f'tokens max abs error / max abs {token_error:.2e}')
  assert token_error < 1e-4
  assert embed_error < 1e-4
