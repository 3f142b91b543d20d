"""OpenAI / open_clip state dicts <-> our (params, model_state). Our parameter names are OpenAI's
(models/clip_model.py), so the names map by rule:
  - a numeric key component joins the previous one: `resblocks.0` <-> `resblocks_0`, `layer1.0` <-> `layer1_0`;
  - conv `weight` [O, I, kh, kw] <-> `kernel` [kh, kw, I, O]; linear `weight` [O, I] <-> `kernel` [I, O];
    `in_proj_weight` / `in_proj_bias` <-> `in_proj/kernel` / `in_proj/bias`; LayerNorm/BatchNorm `weight` <-> `scale`;
  - BatchNorm `running_mean` / `running_var` <-> model state `batch_stats/.../mean` / `var`;
  - everything else (class_embedding, positional_embedding, proj, text_projection, logit_scale) keeps its name.
Import and export share the rules, so export -> import is the identity.
"""
from __future__ import annotations

import re
from typing import Any

import jax
import ml_collections
import numpy as np

from vlp_jax import models
from vlp_jax.models.interchange.files import WeightsError

# Our names of OpenAI's indexed modules (`resblocks_0`), split again on export (`resblocks.0`).
_INDEXED = re.compile(r'^(resblocks|layer\d|downsample)_(\d+)$')


def model_config_for(name: str, fmt: str) -> ml_collections.ConfigDict:
  """The preset `name`, with QuickGELU for OpenAI weights (their towers were trained with it), and for OpenAI's and
  open_clip's CLIP weights torchvision's centre crop (their preprocessing is torchvision's)."""
  config = models.preset(name)
  if fmt == 'openai':
    config.act = 'quick_gelu'
  if fmt in ('openai', 'open_clip') and config.preprocess.resize == 'shorter_side_crop':
    config.preprocess.crop_offset = 'round'
  return config


def torch_key_to_path(key: str, ndim: int) -> tuple[str, tuple[str, ...], str]:
  """OpenAI key -> (collection, path in that collection, layout) with layout one of
  'same', 'linear' (transpose) or 'conv' (OIHW -> HWIO)."""
  parts: list[str] = []
  for part in key.split('.'):
    if part.isdigit() and parts:
      parts[-1] = f'{parts[-1]}_{part}'
    else:
      parts.append(part)
  *module, leaf = parts
  if leaf in ('in_proj_weight', 'in_proj_bias'):
    return 'params', (*module, 'in_proj', 'kernel' if leaf.endswith('weight') else 'bias'), (
        'linear' if leaf.endswith('weight') else 'same')
  if leaf in ('running_mean', 'running_var'):
    return 'batch_stats', (*module, leaf[len('running_'):]), 'same'
  if leaf == 'weight':
    if module and module[-1] == 'token_embedding':
      return 'params', (*module, 'embedding'), 'same'
    if ndim == 4:
      return 'params', (*module, 'kernel'), 'conv'
    if ndim == 2:
      return 'params', (*module, 'kernel'), 'linear'
    return 'params', (*module, 'scale'), 'same'
  return 'params', (*module, leaf), 'same'


def path_to_torch_key(collection: str, path: tuple[str, ...], ndim: int) -> tuple[str, str]:
  """Inverse of `torch_key_to_path`: (OpenAI key, layout)."""
  names = [_INDEXED.sub(r'\1.\2', p) for p in path]
  *module, leaf = names
  if collection == 'batch_stats':
    return '.'.join([*module, f'running_{leaf}']), 'same'
  if module and module[-1] == 'in_proj':
    return '.'.join([*module[:-1], f'in_proj_{"weight" if leaf == "kernel" else "bias"}']), (
        'linear' if leaf == 'kernel' else 'same')
  if leaf == 'kernel':
    return '.'.join([*module, 'weight']), 'conv' if ndim == 4 else 'linear'
  if leaf in ('scale', 'embedding'):
    return '.'.join([*module, 'weight']), 'same'
  return '.'.join(names), 'same'


def _to_flax(array: np.ndarray, layout: str) -> np.ndarray:
  if layout == 'linear':
    return array.T
  if layout == 'conv':
    return array.transpose(2, 3, 1, 0)
  return array


def _to_torch(array: np.ndarray, layout: str) -> np.ndarray:
  if layout == 'linear':
    return array.T
  if layout == 'conv':
    return array.transpose(3, 2, 0, 1)
  return array


def _flatten(tree: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, (*prefix, key)))
    else:
      flat[(*prefix, key)] = value
  return flat


def _unflatten(flat: dict[tuple[str, ...], Any]) -> dict:
  tree: dict = {}
  for path, value in flat.items():
    node = tree
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = value
  return tree


def expected_variables(model_config: ml_collections.ConfigDict) -> dict[str, dict[tuple[str, ...], tuple]]:
  """{collection: {path: shape}} of the model, without allocating it."""
  model = models.build_model(model_config)
  params, state = jax.eval_shape(lambda: models.init_variables(model, jax.random.key(0)))
  shapes = {'params': {p: tuple(v.shape) for p, v in _flatten(params).items()}}
  for collection, tree in state.items():
    shapes[collection] = {p: tuple(v.shape) for p, v in _flatten(tree).items()}
  return shapes


def openai_to_variables(state_dict: dict[str, np.ndarray], model_config: ml_collections.ConfigDict
                        ) -> tuple[dict, dict]:
  """An OpenAI/open_clip state dict -> (params, model_state) for `model_config`.

  Raises WeightsError listing every unexpected key, missing parameter and shape mismatch.
  """
  expected = expected_variables(model_config)
  found: dict[str, dict] = {c: {} for c in expected}
  unexpected, mismatched, mismatched_paths = [], [], set()
  for key, array in state_dict.items():
    collection, path, layout = torch_key_to_path(key, array.ndim)
    if path not in expected.get(collection, {}):
      unexpected.append(key)
      continue
    value = _to_flax(array, layout)
    want = expected[collection][path]
    if tuple(value.shape) != want:
      mismatched.append(f'{key}: file {tuple(array.shape)}, model {"/".join(path)} {want}')
      mismatched_paths.add((collection, path))
      continue
    found[collection][path] = np.array(value, np.float32, order='C')
  missing = [f'{c}:{"/".join(p)}' for c, shapes in expected.items() for p in shapes
             if p not in found[c] and (c, p) not in mismatched_paths]
  if unexpected or missing or mismatched:
    lines = [f'the weights do not fit model {model_config.name}:']
    for title, items in (('unexpected keys', unexpected), ('missing parameters', missing),
                         ('shape mismatches', mismatched)):
      if items:
        lines.append(f'  {len(items)} {title}: ' + ', '.join(items[:40]) + (' ...' if len(items) > 40 else ''))
    raise WeightsError('\n'.join(lines))
  params = _unflatten(found.pop('params'))
  return params, {c: _unflatten(v) for c, v in found.items()}


def variables_to_openai(params: dict, model_state: dict) -> dict[str, np.ndarray]:
  """(params, model_state) -> an OpenAI/open_clip state dict of float32 arrays (what open_clip loads strictly)."""
  out = {}
  for collection, tree in (('params', params), *model_state.items()):
    for path, value in _flatten(tree).items():
      value = np.asarray(value, np.float32)
      key, layout = path_to_torch_key(collection, path, value.ndim)
      out[key] = np.array(_to_torch(value, layout), order='C')  # (ascontiguousarray would make 0-d arrays 1-d)
  for key in [k for k in out if k.endswith('.running_mean')]:  # torch BatchNorm also keeps a step counter
    out[key[:-len('running_mean')] + 'num_batches_tracked'] = np.zeros((), np.int64)
  return out
