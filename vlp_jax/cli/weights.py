"""Weight interchange with OpenAI CLIP, open_clip and Hugging Face transformers.

  python -m vlp_jax.weights import --format={openai,open_clip,hf} [--model=NAME] --input=FILE --output=CKPT
  python -m vlp_jax.weights export --format={open_clip,hf} --checkpoint=CKPT --output=FILE [--ema]

Our parameter names are OpenAI's (see models/clip.py), so OpenAI and open_clip state dicts map by rule:
  - a numeric key component joins the previous one: `resblocks.0` <-> `resblocks_0`, `layer1.0` <-> `layer1_0`;
  - conv `weight` [O, I, kh, kw] <-> `kernel` [kh, kw, I, O]; linear `weight` [O, I] <-> `kernel` [I, O];
    `in_proj_weight` / `in_proj_bias` <-> `in_proj/kernel` / `in_proj/bias`; LayerNorm/BatchNorm `weight` <-> `scale`;
  - BatchNorm `running_mean` / `running_var` <-> model state `batch_stats/.../mean` / `var`;
  - everything else (class_embedding, positional_embedding, proj, text_projection, logit_scale) keeps its name.
Hugging Face `CLIPModel` names are translated to OpenAI's first (q/k/v projections packed into `in_proj`), and the
model's config.json (`--input` may be the model folder) must agree with --model: activation, widths, depths, heads,
patch and image size, context length and projection dim, or nothing is imported. Without --model the config.json
names the model: a CLIP preset it fits, or a `SiglipModel` of whatever size it describes (SigLIP's towers,
models/siglip_vit.py; its SentencePiece file beside the weights becomes the model's tokenizer).

Inputs are `.safetensors` or torch files read with `torch.load(weights_only=True)`: nothing is ever unpickled.
Flags are absl flags; the first argument is the command, import or export. Exit codes as for every command
(cli/common.py): 2 for a bad request, a file that does not fit the model, or a missing input.
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import flags, logging
from safetensors.numpy import load_file, save_file

from vlp_jax import errors, models
from vlp_jax.checkpoint_files import load_variables, resolve_checkpoint
from vlp_jax.cli import common
from vlp_jax.config import base_config
from vlp_jax.data.tokenizer import resolve_tokenizer_file
from vlp_jax.models.transformer import unstacked_layout
from vlp_jax.training.checkpoint import load_config

IMPORT_FORMATS = ('openai', 'open_clip', 'hf')
EXPORT_FORMATS = ('open_clip', 'hf')
# Scalars OpenAI's checkpoints carry beside the weights, and buffers that are not parameters.
_IGNORED_KEYS = re.compile(r'^(input_resolution|context_length|vocab_size)$|(^|\.)(attn_mask|num_batches_tracked|'
                           r'position_ids)$')
_INDEXED = re.compile(r'^(resblocks|layer\d|downsample)_(\d+)$')


# The commands and the flags each one needs, and the switches each one may take (the others must not be given).
COMMANDS = {'import': ('format', 'input', 'output'), 'export': ('format', 'checkpoint', 'output')}
# --model is needed unless a Hugging Face config.json names the model (import_weights says so when it is missing).
SWITCHES = {'import': ('model',), 'export': ('ema',)}


class WeightsError(errors.ConfigError):
  """A bad request, or a state dict that does not fit the model (the message lists every mismatch). Exit code 2."""


# ---------------------------------------------------------------------------------------------------------------
# Reading and writing state dicts


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """A flat {name: float32 array} from `.safetensors` or a torch state-dict file (weights_only=True)."""
  if not os.path.exists(path):
    raise errors.DataNotFoundError(f'no weights file at {path}')
  if path.endswith('.safetensors'):
    try:
      tensors = load_file(path)
    except Exception as error:  # bfloat16 files cannot be read by numpy alone
      if 'bf16' not in str(error).lower() and 'bfloat16' not in str(error).lower():
        raise WeightsError(f'{path} is not a readable .safetensors file (truncated or corrupt?): {error}') from None
      tensors = _torch_tensors(_load_safetensors_with_torch(path))
  else:
    tensors = _torch_tensors(_torch_load(path))
  return {k: np.asarray(v, np.float32) for k, v in tensors.items() if not _IGNORED_KEYS.search(k)}


# torch is imported where it is used, not at the top: it is an optional dependency (`.safetensors` files need none).


def _load_safetensors_with_torch(path: str) -> dict:
  from safetensors.torch import load_file as load_torch_file  # pylint: disable=g-import-not-at-top  # needs torch
  return load_torch_file(path)


def _torch_load(path: str) -> dict:
  try:
    import torch  # pylint: disable=g-import-not-at-top  # optional
  except ImportError as error:
    raise ImportError(f'reading {path} needs torch (pip install torch); or convert it to .safetensors') from error
  try:
    state = torch.load(path, map_location='cpu', weights_only=True)
  except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for bad files
    text = str(error)
    first_line = text.splitlines()[0] if text else ''
    if 'torchscript' in text.lower():
      raise WeightsError(
          f'{path} is a TorchScript archive (OpenAI\'s original .pt files are), which cannot be read without '
          'running its code. Convert it once, in an environment you trust, with: '
          "python -c \"import torch, safetensors.torch as st; m = torch.jit.load('MODEL.pt', map_location='cpu'); "
          "st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, 'MODEL.safetensors')\" "
          'and import the .safetensors file.') from error
    if 'weights only load failed' in text.lower() or 'weights_only' in text:
      raise WeightsError(
          f'{path} holds Python objects besides tensors; it was not loaded, because unpickling them would run code '
          f'from the file (torch.load with weights_only=True refused it: {first_line}). Save a plain state dict '
          'of tensors, or .safetensors, instead.') from None
    raise WeightsError(f'{path} could not be read as a torch state dict (truncated or corrupt?): '
                       f'{type(error).__name__}: {first_line}') from None
  if isinstance(state, dict) and 'state_dict' in state and isinstance(state['state_dict'], dict):
    state = state['state_dict']  # open_clip training checkpoints
  if not isinstance(state, dict):
    raise WeightsError(f'{path} does not hold a state dict (got {type(state).__name__})')
  return {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}


def _torch_tensors(state: dict) -> dict[str, np.ndarray]:
  import torch  # pylint: disable=g-import-not-at-top  # optional
  return {k: (v.float().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)) for k, v in state.items()}


# ---------------------------------------------------------------------------------------------------------------
# OpenAI / open_clip names <-> our parameter tree


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


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face CLIPModel names <-> OpenAI names

_HF_BLOCK = {'self_attn.out_proj': 'attn.out_proj', 'layer_norm1': 'ln_1', 'layer_norm2': 'ln_2',
             'mlp.fc1': 'mlp.c_fc', 'mlp.fc2': 'mlp.c_proj'}
_HF_FIXED = {
    'vision_model.embeddings.class_embedding': 'visual.class_embedding',
    'vision_model.embeddings.patch_embedding.weight': 'visual.conv1.weight',
    'vision_model.embeddings.position_embedding.weight': 'visual.positional_embedding',
    'vision_model.pre_layrnorm.weight': 'visual.ln_pre.weight', 'vision_model.pre_layrnorm.bias': 'visual.ln_pre.bias',
    'vision_model.post_layernorm.weight': 'visual.ln_post.weight',
    'vision_model.post_layernorm.bias': 'visual.ln_post.bias',
    'text_model.embeddings.token_embedding.weight': 'token_embedding.weight',
    'text_model.embeddings.position_embedding.weight': 'positional_embedding',
    'text_model.final_layer_norm.weight': 'ln_final.weight', 'text_model.final_layer_norm.bias': 'ln_final.bias',
    'logit_scale': 'logit_scale',
}
_HF_TOWERS = {'vision_model': 'visual.transformer', 'text_model': 'transformer'}
_HF_LAYER = re.compile(r'^(vision_model|text_model)\.encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$')


_HF_TRANSPOSED = {'visual_projection.weight': 'visual.proj', 'text_projection.weight': 'text_projection'}


def hf_to_openai(state_dict: dict[str, np.ndarray], siglip: bool = False) -> dict[str, np.ndarray]:
  """transformers CLIPModel names (SiglipModel's with `siglip`) -> OpenAI names (ours, for the SigLIP parts); q/k/v
  are packed into in_proj, projections transposed."""
  fixed, transposed = (_HF_SIGLIP_FIXED, _HF_SIGLIP_TRANSPOSED) if siglip else (_HF_FIXED, _HF_TRANSPOSED)
  out, qkv, unknown = {}, {}, []
  for key, value in state_dict.items():
    if key in fixed:
      out[fixed[key]] = value.reshape(()) if key in _HF_SIGLIP_SCALARS and siglip else value
    elif key in transposed:
      out[transposed[key]] = value.T
    elif match := _HF_LAYER.match(key):
      tower, index, module, kind = match.groups()
      prefix = f'{_HF_TOWERS[tower]}.resblocks.{index}'
      if module in ('self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj'):
        qkv.setdefault((prefix, kind), {})[module[-6]] = value
      elif module in _HF_BLOCK:
        out[f'{prefix}.{_HF_BLOCK[module]}.{kind}'] = value
      else:
        unknown.append(key)
    else:
      unknown.append(key)
  for (prefix, kind), parts in qkv.items():
    if set(parts) != {'q', 'k', 'v'}:
      raise WeightsError(f'{prefix}: the Hugging Face file lacks {sorted({"q", "k", "v"} - set(parts))} projections')
    out[f'{prefix}.attn.in_proj_{kind}'] = np.concatenate([parts['q'], parts['k'], parts['v']], axis=0)
  if unknown:
    raise WeightsError(f'{len(unknown)} unexpected keys in the Hugging Face file: ' + ', '.join(unknown[:40]))
  return out


def openai_to_hf(state_dict: dict[str, np.ndarray], siglip: bool = False) -> dict[str, np.ndarray]:
  """Inverse of `hf_to_openai`."""
  fixed = {v: k for k, v in (_HF_SIGLIP_FIXED if siglip else _HF_FIXED).items()}
  transposed = {v: k for k, v in (_HF_SIGLIP_TRANSPOSED if siglip else _HF_TRANSPOSED).items()}
  block = {v: k for k, v in _HF_BLOCK.items()}
  towers = {v: k for k, v in _HF_TOWERS.items()}
  out = {}
  for key, value in state_dict.items():
    if key in fixed:
      out[fixed[key]] = value.reshape(1) if fixed[key] in _HF_SIGLIP_SCALARS and siglip else value
    elif key in transposed:
      out[transposed[key]] = np.array(value.T, order='C')
    elif match := re.match(r'^(visual\.transformer|transformer)\.resblocks\.(\d+)\.(.+)\.(weight|bias)$', key):
      tower, index, module, kind = match.groups()
      prefix = f'{towers[tower]}.encoder.layers.{index}'
      out[f'{prefix}.{block[module]}.{kind}'] = value
    elif match := re.match(r'^(visual\.transformer|transformer)\.resblocks\.(\d+)\.attn\.in_proj_(weight|bias)$',
                           key):
      tower, index, kind = match.groups()
      for name, part in zip('qkv', np.split(value, 3, axis=0)):
        out[f'{towers[tower]}.encoder.layers.{index}.self_attn.{name}_proj.{kind}'] = np.array(part, order='C')
    else:
      raise WeightsError(f'{key} has no Hugging Face {"SiglipModel" if siglip else "CLIPModel"} equivalent (only '
                         'ViT models export to hf)')
  return out


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face SiglipModel: names (the blocks are named as CLIPModel's) and config.json

_HF_SIGLIP_FIXED = {
    'vision_model.embeddings.patch_embedding.weight': 'visual.conv1.weight',
    'vision_model.embeddings.patch_embedding.bias': 'visual.conv1.bias',
    'vision_model.embeddings.position_embedding.weight': 'visual.positional_embedding',
    'vision_model.post_layernorm.weight': 'visual.ln_post.weight',
    'vision_model.post_layernorm.bias': 'visual.ln_post.bias',
    'vision_model.head.probe': 'visual.attn_pool.probe',
    'vision_model.head.attention.in_proj_weight': 'visual.attn_pool.attn.in_proj_weight',
    'vision_model.head.attention.in_proj_bias': 'visual.attn_pool.attn.in_proj_bias',
    'vision_model.head.attention.out_proj.weight': 'visual.attn_pool.attn.out_proj.weight',
    'vision_model.head.attention.out_proj.bias': 'visual.attn_pool.attn.out_proj.bias',
    'vision_model.head.layernorm.weight': 'visual.attn_pool.ln.weight',
    'vision_model.head.layernorm.bias': 'visual.attn_pool.ln.bias',
    'vision_model.head.mlp.fc1.weight': 'visual.attn_pool.mlp.c_fc.weight',
    'vision_model.head.mlp.fc1.bias': 'visual.attn_pool.mlp.c_fc.bias',
    'vision_model.head.mlp.fc2.weight': 'visual.attn_pool.mlp.c_proj.weight',
    'vision_model.head.mlp.fc2.bias': 'visual.attn_pool.mlp.c_proj.bias',
    'text_model.embeddings.token_embedding.weight': 'token_embedding.weight',
    'text_model.embeddings.position_embedding.weight': 'positional_embedding',
    'text_model.final_layer_norm.weight': 'ln_final.weight', 'text_model.final_layer_norm.bias': 'ln_final.bias',
    'text_model.head.bias': 'text_projection_bias',
    'logit_scale': 'logit_scale', 'logit_bias': 'logit_bias',
}
_HF_SIGLIP_TRANSPOSED = {'text_model.head.weight': 'text_projection'}
_HF_SIGLIP_SCALARS = ('logit_scale', 'logit_bias')  # [1] in transformers, scalars in our tree

# transformers' activation names <-> ours (its 'gelu' is the exact GELU, as ours).
_HF_ACTS = {'gelu_pytorch_tanh': 'gelu_tanh', 'gelu_new': 'gelu_tanh', 'gelu': 'gelu', 'quick_gelu': 'quick_gelu'}
_ACTS_TO_HF = {'gelu_tanh': 'gelu_pytorch_tanh', 'gelu': 'gelu', 'quick_gelu': 'quick_gelu'}  # what exports write
# transformers' SiglipTextConfig / SiglipVisionConfig defaults, for the fields a config.json leaves out.
HF_SIGLIP_DEFAULTS = {
    'text_config': {'vocab_size': 32000, 'hidden_size': 768, 'intermediate_size': 3072, 'num_hidden_layers': 12,
                    'num_attention_heads': 12, 'max_position_embeddings': 64, 'hidden_act': 'gelu_pytorch_tanh',
                    'layer_norm_eps': 1e-6, 'projection_size': None},
    'vision_config': {'hidden_size': 768, 'intermediate_size': 3072, 'num_hidden_layers': 12,
                      'num_attention_heads': 12, 'image_size': 224, 'patch_size': 16,
                      'hidden_act': 'gelu_pytorch_tanh', 'layer_norm_eps': 1e-6, 'vision_use_head': True},
}


def _siglip_value(hf: dict, section: str, key: str) -> Any:
  return (hf.get(section) or {}).get(key, HF_SIGLIP_DEFAULTS[section][key])


def siglip_model_config(hf: dict) -> ml_collections.ConfigDict:
  """The model config a transformers SiglipConfig dict describes: a SigLIP preset's (the one it matches, else
  ViT-B-16-SigLIP's, named 'hf-siglip') with every size read from the file."""
  def tower(section: str) -> dict:
    width = _siglip_value(hf, section, 'hidden_size')
    hidden = _siglip_value(hf, section, 'intermediate_size')
    return dict(width=width, layers=_siglip_value(hf, section, 'num_hidden_layers'),
                heads=_siglip_value(hf, section, 'num_attention_heads'),
                mlp_width=0 if hidden == 4 * width else hidden, ln_eps=_siglip_value(hf, section, 'layer_norm_eps'))
  for section in ('vision_config', 'text_config'):
    act = _siglip_value(hf, section, 'hidden_act')
    if act not in _HF_ACTS:
      raise WeightsError(f'{section}.hidden_act={act!r} has no vlp_jax equivalent; valid choices: {list(_HF_ACTS)}')
  if not _siglip_value(hf, 'vision_config', 'vision_use_head'):
    raise WeightsError('vision_config.vision_use_head=false: vlp_jax needs the attention-pooling head that gives '
                       'SigLIP its image embedding')
  acts = {_HF_ACTS[_siglip_value(hf, s, 'hidden_act')] for s in ('vision_config', 'text_config')}
  if len(acts) > 1:
    raise WeightsError(f'the towers use different activations {sorted(acts)}; vlp_jax models share one')
  vision, text = tower('vision_config'), tower('text_config')
  projection = _siglip_value(hf, 'text_config', 'projection_size') or text['width']
  if projection != vision['width']:
    raise WeightsError(f'text_config.projection_size={projection} differs from vision_config.hidden_size='
                       f'{vision["width"]}: the joint space of a SigLIP model is the image tower\'s width')
  config = models.preset('ViT-B-16-SigLIP')
  config.act = acts.pop()
  config.embed_dim = vision['width']
  config.vision.update(vision, image_size=_siglip_value(hf, 'vision_config', 'image_size'),
                       patch_size=_siglip_value(hf, 'vision_config', 'patch_size'))
  config.text.update(text, context_length=_siglip_value(hf, 'text_config', 'max_position_embeddings'),
                     vocab_size=_siglip_value(hf, 'text_config', 'vocab_size'))
  config.name = next((name for name in sorted(models.PRESETS) if 'SigLIP' in name
                      and not siglip_mismatches(config, models.preset(name))), 'hf-siglip')
  return config


_SIGLIP_FIELDS = ('act', 'embed_dim', *(f'vision.{k}' for k in ('image_size', 'patch_size', 'width', 'layers', 'heads',
                                                                 'mlp_width', 'ln_eps')),
                  *(f'text.{k}' for k in ('context_length', 'vocab_size', 'width', 'layers', 'heads', 'mlp_width',
                                          'ln_eps')))


def siglip_mismatches(got: ml_collections.ConfigDict, want: ml_collections.ConfigDict) -> list[tuple[str, Any, Any]]:
  """[(field, got, want)] for every SigLIP size or option on which two model configs differ."""
  out = []
  for field in _SIGLIP_FIELDS:
    a, b = got, want
    for part in field.split('.'):
      a, b = a[part], b[part]
    if a != b:
      out.append((field, a, b))
  return out


def hf_siglip_config(model_config: ml_collections.ConfigDict) -> dict:
  """A transformers SiglipConfig (as JSON) describing a SigLIP `model_config`."""
  v, t = model_config.vision, model_config.text
  act = _ACTS_TO_HF[model_config.act]

  def tower(spec) -> dict:
    return {'hidden_size': spec.width, 'intermediate_size': spec.mlp_width or 4 * spec.width,
            'num_hidden_layers': spec.layers, 'num_attention_heads': spec.heads, 'hidden_act': act,
            'layer_norm_eps': spec.ln_eps}
  return {
      'architectures': ['SiglipModel'], 'model_type': 'siglip',
      'text_config': {'model_type': 'siglip_text_model', **tower(t), 'max_position_embeddings': t.context_length,
                      'vocab_size': t.vocab_size, 'projection_size': model_config.embed_dim},
      'vision_config': {'model_type': 'siglip_vision_model', **tower(v), 'image_size': v.image_size,
                        'patch_size': v.patch_size, 'num_channels': 3, 'vision_use_head': True},
  }


# open_clip's SigLIP models: a timm image trunk under `visual.trunk.` and open_clip's own text tower under `text.`.
# (open_clip key pattern, our key): blocks by rule, the rest by name. timm's attention pool keeps q and kv apart,
# packed here into one in_proj (q rows first, then k, then v, as timm's kv holds them).
_OC_SIGLIP_RULES = (
    (r'visual\.trunk\.blocks\.(\d+)\.norm1\.', r'visual.transformer.resblocks.\1.ln_1.'),
    (r'visual\.trunk\.blocks\.(\d+)\.norm2\.', r'visual.transformer.resblocks.\1.ln_2.'),
    (r'visual\.trunk\.blocks\.(\d+)\.attn\.qkv\.(weight|bias)$', r'visual.transformer.resblocks.\1.attn.in_proj_\2'),
    (r'visual\.trunk\.blocks\.(\d+)\.attn\.proj\.', r'visual.transformer.resblocks.\1.attn.out_proj.'),
    (r'visual\.trunk\.blocks\.(\d+)\.mlp\.fc1\.', r'visual.transformer.resblocks.\1.mlp.c_fc.'),
    (r'visual\.trunk\.blocks\.(\d+)\.mlp\.fc2\.', r'visual.transformer.resblocks.\1.mlp.c_proj.'),
    (r'visual\.trunk\.patch_embed\.proj\.', 'visual.conv1.'),
    (r'visual\.trunk\.norm\.', 'visual.ln_post.'),
    (r'visual\.trunk\.attn_pool\.latent$', 'visual.attn_pool.probe'),
    (r'visual\.trunk\.attn_pool\.proj\.', 'visual.attn_pool.attn.out_proj.'),
    (r'visual\.trunk\.attn_pool\.norm\.', 'visual.attn_pool.ln.'),
    (r'visual\.trunk\.attn_pool\.mlp\.fc1\.', 'visual.attn_pool.mlp.c_fc.'),
    (r'visual\.trunk\.attn_pool\.mlp\.fc2\.', 'visual.attn_pool.mlp.c_proj.'),
    (r'text\.(token_embedding|positional_embedding|transformer|ln_final)', r'\1'),
    (r'text\.text_projection\.bias$', 'text_projection_bias'),
)


def open_clip_siglip_to_openai(state_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """An open_clip SigLIP state dict (`ViT-B-16-SigLIP` and kin) -> our OpenAI-style names (see `_OC_SIGLIP_RULES`);
  WeightsError lists the keys it cannot place."""
  out, pool_qkv, unknown = {}, {}, []
  for key, value in state_dict.items():
    if key in ('logit_scale', 'logit_bias'):
      out[key] = value.reshape(())
    elif key == 'visual.trunk.pos_embed':
      out['visual.positional_embedding'] = value.reshape(value.shape[-2:])
    elif key == 'text.text_projection.weight':
      out['text_projection'] = value.T
    elif match := re.match(r'^visual\.trunk\.attn_pool\.(q|kv)\.(weight|bias)$', key):
      pool_qkv.setdefault(match.group(2), {})[match.group(1)] = value
    else:
      for pattern, replacement in _OC_SIGLIP_RULES:
        if re.match(pattern, key):
          out[re.sub(pattern, replacement, key, count=1)] = value
          break
      else:
        unknown.append(key)
  for kind, parts in pool_qkv.items():
    if set(parts) != {'q', 'kv'}:
      raise WeightsError(f'visual.trunk.attn_pool: the open_clip file lacks {sorted({"q", "kv"} - set(parts))}')
    out[f'visual.attn_pool.attn.in_proj_{kind}'] = np.concatenate([parts['q'], parts['kv']], axis=0)
  if unknown:
    raise WeightsError(f'{len(unknown)} keys of the open_clip file have no place in a SigLIP model: '
                       + ', '.join(unknown[:40]))
  return out


def openai_to_open_clip_siglip(state_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Inverse of `open_clip_siglip_to_openai`: what open_clip's SigLIP models load strictly."""
  out = {}
  for key, value in state_dict.items():
    if key in ('logit_scale', 'logit_bias'):
      out[key] = value.reshape(1)
    elif key == 'visual.positional_embedding':
      out['visual.trunk.pos_embed'] = value[None]
    elif key == 'text_projection':
      out['text.text_projection.weight'] = np.array(value.T, order='C')
    elif key == 'text_projection_bias':
      out['text.text_projection.bias'] = value
    elif match := re.match(r'^visual\.attn_pool\.attn\.in_proj_(weight|bias)$', key):
      width = value.shape[0] // 3
      out[f'visual.trunk.attn_pool.q.{match.group(1)}'] = np.array(value[:width], order='C')
      out[f'visual.trunk.attn_pool.kv.{match.group(1)}'] = np.array(value[width:], order='C')
    elif key.startswith(('token_embedding', 'positional_embedding', 'transformer.', 'ln_final')):
      out[f'text.{key}'] = value
    elif match := re.match(r'^visual\.transformer\.resblocks\.(\d+)\.(.+)$', key):
      block, rest = match.groups()
      names = {'ln_1.': 'norm1.', 'ln_2.': 'norm2.', 'attn.in_proj_weight': 'attn.qkv.weight',
               'attn.in_proj_bias': 'attn.qkv.bias', 'attn.out_proj.': 'attn.proj.', 'mlp.c_fc.': 'mlp.fc1.',
               'mlp.c_proj.': 'mlp.fc2.'}
      prefix = next(ours for ours in names if rest.startswith(ours))
      out[f'visual.trunk.blocks.{block}.{names[prefix]}{rest[len(prefix):]}'] = value
    else:
      names = {'visual.conv1.': 'visual.trunk.patch_embed.proj.', 'visual.ln_post.': 'visual.trunk.norm.',
               'visual.attn_pool.probe': 'visual.trunk.attn_pool.latent',
               'visual.attn_pool.attn.out_proj.': 'visual.trunk.attn_pool.proj.',
               'visual.attn_pool.ln.': 'visual.trunk.attn_pool.norm.',
               'visual.attn_pool.mlp.c_fc.': 'visual.trunk.attn_pool.mlp.fc1.',
               'visual.attn_pool.mlp.c_proj.': 'visual.trunk.attn_pool.mlp.fc2.'}
      prefix = next((ours for ours in names if key.startswith(ours)), None)
      if prefix is None:
        raise WeightsError(f'{key} has no open_clip SigLIP equivalent')
      out[names[prefix] + key[len(prefix):]] = value
  return out


def hf_config(model_config: ml_collections.ConfigDict) -> dict:
  """A transformers CLIPConfig (as JSON) describing `model_config`."""
  v, t = model_config.vision, model_config.text
  act = 'quick_gelu' if model_config.act == 'quick_gelu' else 'gelu'
  return {
      'architectures': ['CLIPModel'], 'model_type': 'clip', 'projection_dim': model_config.embed_dim,
      'logit_scale_init_value': float(model_config.init_logit_scale),
      'text_config': {
          'model_type': 'clip_text_model', 'hidden_size': t.width, 'intermediate_size': 4 * t.width,
          'num_attention_heads': t.heads, 'num_hidden_layers': t.layers, 'max_position_embeddings': t.context_length,
          'vocab_size': t.vocab_size, 'hidden_act': act, 'layer_norm_eps': 1e-5,
          'projection_dim': model_config.embed_dim,
          # eos_token_id 2 makes transformers pool at the argmax of the ids, exactly as OpenAI CLIP does.
          'bos_token_id': 49406, 'eos_token_id': 2, 'pad_token_id': 1},
      'vision_config': {
          'model_type': 'clip_vision_model', 'hidden_size': v.width, 'intermediate_size': 4 * v.width,
          'num_attention_heads': v.heads, 'num_hidden_layers': v.layers, 'image_size': v.image_size,
          'patch_size': v.patch_size, 'hidden_act': act, 'layer_norm_eps': 1e-5,
          'projection_dim': model_config.embed_dim, 'num_channels': 3},
  }


# ---------------------------------------------------------------------------------------------------------------
# A Hugging Face model's config.json against the --model preset

# transformers' CLIPConfig / CLIPTextConfig / CLIPVisionConfig defaults, for the fields a config.json leaves out
# (save_pretrained may write only what differs from them); tests/parity/test_weights.py checks them against
# transformers.
HF_CLIP_DEFAULTS = {
    'projection_dim': 512,
    'text_config': {'hidden_act': 'quick_gelu', 'hidden_size': 512, 'num_hidden_layers': 12, 'num_attention_heads': 8,
                    'max_position_embeddings': 77, 'vocab_size': 49408},
    'vision_config': {'hidden_act': 'quick_gelu', 'hidden_size': 768, 'num_hidden_layers': 12,
                      'num_attention_heads': 12, 'image_size': 224, 'patch_size': 32},
}
# (our model config field, section of the CLIPConfig or None for its top level, key in that section). Both towers'
# activations are checked: ours share one `act`. transformers' 'gelu' is the exact (erf) GELU, as ours.
HF_CONFIG_FIELDS = (
    ('act', 'vision_config', 'hidden_act'), ('act', 'text_config', 'hidden_act'),
    ('embed_dim', None, 'projection_dim'),
    ('vision.width', 'vision_config', 'hidden_size'), ('vision.layers', 'vision_config', 'num_hidden_layers'),
    ('vision.heads', 'vision_config', 'num_attention_heads'), ('vision.patch_size', 'vision_config', 'patch_size'),
    ('vision.image_size', 'vision_config', 'image_size'),
    ('text.width', 'text_config', 'hidden_size'), ('text.layers', 'text_config', 'num_hidden_layers'),
    ('text.heads', 'text_config', 'num_attention_heads'),
    ('text.context_length', 'text_config', 'max_position_embeddings'), ('text.vocab_size', 'text_config', 'vocab_size'),
)


def hf_input_files(input_path: str) -> tuple[str, str | None]:
  """--input of `--format=hf` -> (weights file, its config.json or None).

  input_path: a transformers model folder (its `model.safetensors` is read) or a weights file; the config.json is
  the one in that folder, or beside that file.
  """
  if os.path.isdir(input_path):
    weights_path = os.path.join(input_path, 'model.safetensors')
    if not os.path.isfile(weights_path):
      raise errors.DataNotFoundError(f'{input_path} is a folder without model.safetensors (it holds '
                                     f'{sorted(os.listdir(input_path))[:20]}); pass the weights file as --input')
  else:
    weights_path = input_path
  config_path = os.path.join(os.path.dirname(os.path.abspath(weights_path)), 'config.json')
  return weights_path, config_path if os.path.isfile(config_path) else None


def read_hf_config(path: str) -> dict:
  """A transformers CLIPModel config.json as a dict; WeightsError if it is unreadable or not a CLIP config."""
  try:
    with open(path, encoding='utf-8') as f:
      hf = json.load(f)
  except (OSError, ValueError) as error:
    raise WeightsError(f'{path} could not be read as JSON: {error}') from None
  if not isinstance(hf, dict) or hf.get('model_type', 'clip') not in ('clip', 'siglip'):
    kind = hf.get('model_type') if isinstance(hf, dict) else type(hf).__name__
    raise WeightsError(f"{path} describes a {kind!r} model; --format=hf imports a transformers CLIPModel "
                       "(model_type 'clip') or SiglipModel (model_type 'siglip')")
  return hf


def _hf_value(hf: dict, section: str | None, key: str) -> Any:
  """A field of a CLIPConfig dict, or transformers' default when the file leaves it out. Files written by early
  transformers versions may hold a tower's settings under `text_config_dict` / `vision_config_dict` instead."""
  if section is None:
    return hf.get(key, HF_CLIP_DEFAULTS[key])
  values = hf.get(section) or hf.get(f'{section}_dict') or {}
  return values.get(key, HF_CLIP_DEFAULTS[section][key])


def hf_config_mismatches(hf: dict, model_config: ml_collections.ConfigDict) -> list[tuple[str, Any, Any]]:
  """Every field where a CLIPConfig dict and `model_config` disagree: [(field, file value, model value)], field
  named as 'ours (section.key)', e.g. ('act (vision_config.hidden_act)', 'quick_gelu', 'gelu'). [] when they fit."""
  mismatches = []
  for ours, section, key in HF_CONFIG_FIELDS:
    want = model_config
    for part in ours.split('.'):
      want = want[part]
    got = _hf_value(hf, section, key)
    if got != want:
      mismatches.append((f'{ours} ({section + "." if section else ""}{key})', got, want))
  return mismatches


def hf_matching_presets(hf: dict) -> list[str]:
  """The names of the ViT presets a CLIPConfig dict fits in every checked field (sorted)."""
  return [name for name in sorted(models.PRESETS)
          if models.PRESETS[name]['vision']['type'] == 'vit'
          and not hf_config_mismatches(hf, model_config_for(name, 'hf'))]


def check_hf_config(hf: dict, config_path: str, name: str, model_config: ml_collections.ConfigDict) -> None:
  """Raise WeightsError listing every mismatch between the model's config.json and the --model preset, with the
  preset that fits the file when there is one; return quietly when they agree."""
  mismatches = hf_config_mismatches(hf, model_config)
  if not mismatches:
    return
  lines = [f'{config_path} does not match --model={name} ({len(mismatches)} '
           f'mismatch{"es" if len(mismatches) > 1 else ""}; importing anyway would give wrong embeddings):']
  lines += [f'  {field}: file {got!r}, --model={name} {want!r}' for field, got, want in mismatches]
  fitting = hf_matching_presets(hf)
  if fitting:
    lines.append(f'Use --model={fitting[0]}' + (f' (or {", ".join(fitting[1:])})' if fitting[1:] else '')
                 + ', which matches the file.')
  else:
    lines.append(f'No preset matches the file; valid choices: {sorted(models.PRESETS)}.')
  raise WeightsError('\n'.join(lines))


def _note(message: str) -> None:
  print(f'note: {message}', file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints


def model_config_for(name: str, fmt: str) -> ml_collections.ConfigDict:
  """The preset `name`, with QuickGELU for OpenAI weights (their towers were trained with it)."""
  config = models.preset(name)
  if fmt == 'openai':
    config.act = 'quick_gelu'
  return config


def save_checkpoint(path: str, params: dict, model_state: dict, config: ml_collections.ConfigDict) -> str:
  """An orbax checkpoint directory with `state` ({step, params, model_state}) and the full `config`, written
  atomically; `training.checkpoint.load_variables` / `load_config` and every vlp_jax command read it like a training
  step directory."""
  path = os.path.abspath(path)
  if os.path.exists(path):
    raise WeightsError(f'{path} exists; choose a new --output (nothing was overwritten)')
  checkpointer = ocp.Checkpointer(ocp.CompositeCheckpointHandler('state', 'config'))
  checkpointer.save(path, args=ocp.args.Composite(
      state=ocp.args.StandardSave({'step': np.zeros((), np.int32), 'params': params, 'model_state': model_state}),
      config=ocp.args.JsonSave(config.to_dict())))
  checkpointer.close()
  return path


def _hf_model_config(hf: dict | None, config_path: str | None, name: str | None, weights_path: str
                     ) -> ml_collections.ConfigDict:
  """The model config of a Hugging Face import: the --model preset checked against the config.json, or without
  --model the model the config.json describes (a CLIP preset it fits; a SigLIP model of any size)."""
  if hf is None:
    if name is None:
      raise WeightsError(f'import --format=hf needs --model: there is no config.json beside {weights_path} to read '
                         f'the model from; valid choices: {sorted(models.PRESETS)}')
    model_config = model_config_for(name, 'hf')
    _note(f'no config.json beside {weights_path}, so --model={name} (act={model_config.act!r}) was not checked '
          'against the model; OpenAI CLIP models on the Hugging Face hub need a -quickgelu variant')
    return model_config
  if hf.get('model_type') == 'siglip':
    described = siglip_model_config(hf)
    if name is None:
      return described
    model_config = model_config_for(name, 'hf')
    mismatches = siglip_mismatches(described, model_config)
    if model_config.vision.type != 'siglip_vit' or mismatches:
      lines = [f'{config_path} describes a SiglipModel that does not match --model={name}:']
      lines += [f'  {field}: file {got!r}, --model={name} {want!r}' for field, got, want in mismatches]
      fits = described.name if described.name in models.PRESETS else None
      lines.append(f'Use --model={fits}, which matches the file.' if fits else
                   'Leave out --model to import the model the file describes.')
      raise WeightsError('\n'.join(lines))
    return model_config
  if name is None:
    fitting = hf_matching_presets(hf)
    if not fitting:
      raise WeightsError(f'no preset matches {config_path}; pass --model (valid choices: {sorted(models.PRESETS)})')
    name = fitting[0]
  model_config = model_config_for(name, 'hf')
  check_hf_config(hf, config_path, name, model_config)
  return model_config


def import_weights(fmt: str, name: str | None, input_path: str, output: str) -> str:
  """Import a state dict of format `fmt` for preset `name` from `input_path` into a new checkpoint at `output`.

  For 'hf', `input_path` may be the model folder; its config.json (in the folder, or beside the weights file) must
  agree with the preset, activation included, or nothing is written (WeightsError lists every mismatch). Without
  `name` the model is the one the config.json describes: a transformers CLIPModel (a preset it fits) or
  SiglipModel (any size). A SigLIP import records the SentencePiece file found beside the weights (spiece.model or
  tokenizer.json) as the model's `text.tokenizer_path`.
  """
  if fmt not in IMPORT_FORMATS:
    raise WeightsError(f"import --format={fmt} is not valid; valid choices: {list(IMPORT_FORMATS)}")
  if fmt == 'hf':
    input_path, config_path = hf_input_files(input_path)
    model_config = _hf_model_config(read_hf_config(config_path) if config_path else None, config_path, name,
                                    input_path)
  elif name is None:
    raise WeightsError(f'import --format={fmt} needs --model (the open_clip model name); valid choices: '
                       f'{sorted(models.PRESETS)}')
  else:
    model_config = model_config_for(name, fmt)
    if fmt == 'open_clip' and f'{name}-quickgelu' in models.PRESETS:
      _note(f'--model={name} uses GELU; weights trained by OpenAI (open_clip\'s "openai" tags) need '
            f'--model={name}-quickgelu (or --format=openai)')
  siglip = model_config.vision.type == 'siglip_vit'
  if siglip and fmt == 'openai':
    raise WeightsError(f'--model={name} is a SigLIP model, and OpenAI released no SigLIP weights; import its '
                       'weights with --format=open_clip or --format=hf')
  if siglip:
    try:  # the spiece.model or tokenizer.json beside the weights
      model_config.text.tokenizer_path = resolve_tokenizer_file(os.path.dirname(os.path.abspath(input_path)))
    except errors.ConfigError:
      model_config.text.tokenizer_path = ''
    if not model_config.text.tokenizer_path:
      _note(f'no spiece.model or tokenizer.json beside {input_path}: set --config.model.text.tokenizer_path to '
            'the SentencePiece file of these weights when training or evaluating')
  state_dict = read_state_dict(input_path)
  if fmt == 'hf':
    state_dict = hf_to_openai(state_dict, siglip=siglip)
  elif siglip:
    state_dict = open_clip_siglip_to_openai(state_dict)
  params, model_state = openai_to_variables(state_dict, model_config)
  config = base_config()
  config.model = model_config
  return save_checkpoint(output, params, model_state, config)


def export_weights(fmt: str, checkpoint: str, output: str, ema: bool = False) -> str:
  """Export the two towers of `checkpoint` (a step directory, an imported checkpoint or a workdir) as an open_clip
  .safetensors file or a Hugging Face CLIPModel folder at `output`, which must not exist. With `ema`, the towers of
  the checkpoint's EMA of the weights (config.ema.decay) instead of its parameters."""
  if fmt not in EXPORT_FORMATS:
    raise WeightsError(f"export --format={fmt} is not valid; valid choices: {list(EXPORT_FORMATS)}")
  checkpoint = resolve_checkpoint(checkpoint)
  config = load_config(checkpoint)
  params, model_state = load_variables(checkpoint, ema=ema)
  # Only the two towers go out: objective heads (SimCLR, COSMOS cross-attention, SigLIP's bias, an EMA teacher)
  # have no place in an open_clip or transformers CLIP.
  towers = {path[0] for path in expected_variables(config.model)['params']}
  params = unstacked_layout({k: v for k, v in params.items() if k in towers})  # weight files name every block
  model_state = {k: v for k, v in model_state.items() if k == 'batch_stats'}
  state_dict = variables_to_openai(params, model_state)
  if os.path.exists(output):
    raise WeightsError(f'{output} exists; choose a new --output (nothing was overwritten)')
  siglip = config.model.vision.type == 'siglip_vit'
  if fmt == 'open_clip':
    save_file(openai_to_open_clip_siglip(state_dict) if siglip else state_dict, output)
    return output
  if config.model.vision.type not in ('vit', 'siglip_vit'):
    raise WeightsError('transformers has no CLIPModel for ResNet towers; export RN models with --format=open_clip')
  os.makedirs(output)
  save_file(openai_to_hf(state_dict, siglip=siglip), os.path.join(output, 'model.safetensors'),
            metadata={'format': 'pt'})
  with open(os.path.join(output, 'config.json'), 'w') as f:
    json.dump(hf_siglip_config(config.model) if siglip else hf_config(config.model), f, indent=2)
  return output


# ---------------------------------------------------------------------------------------------------------------
# Command line


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The flags of both commands (which takes which: COMMANDS)."""
  flags.DEFINE_string('format', None, f'import: one of {", ".join(IMPORT_FORMATS)}; export: one of '
                      f'{", ".join(EXPORT_FORMATS)}.', flag_values=flag_values)
  flags.DEFINE_string('model', None, f'import: the open_clip model name, one of {", ".join(sorted(models.PRESETS))}.',
                      flag_values=flag_values)
  flags.DEFINE_string('input', None, 'import: .safetensors, or a torch state dict (read with weights_only); for '
                      '--format=hf also the model folder (its config.json is checked against --model).',
                      flag_values=flag_values)
  flags.DEFINE_string('checkpoint', None, 'export: a checkpoint step directory, an imported checkpoint, or a workdir '
                      '(its latest step).', flag_values=flag_values)
  flags.DEFINE_string('output', None, 'import: the checkpoint directory to create; export: the .safetensors file '
                      '(open_clip) or the folder (hf) to create.', flag_values=flag_values)
  flags.DEFINE_bool('ema', None, "export: the run's EMA of the weights (trained with config.ema.decay > 0) instead "
                    'of its parameters.', flag_values=flag_values)


def run(name: str, values: dict[str, Any]) -> str:
  """The command `name` (import or export) with the flag values {flag: value or None}: the path it wrote."""
  if name not in COMMANDS:
    raise WeightsError(f'unknown command {name!r}; valid choices: {list(COMMANDS)}, e.g. python -m vlp_jax.weights '
                       'import --format=open_clip --model=ViT-B-32 --input=FILE --output=CKPT')
  wanted = COMMANDS[name]
  takes = wanted + SWITCHES[name]
  missing = [f'--{flag}' for flag in wanted if values.get(flag) is None]
  if missing:
    raise WeightsError(f'{name} needs {", ".join(missing)} (it takes {", ".join(f"--{f}" for f in takes)})')
  extra = [f'--{flag}' for flag, value in values.items() if value is not None and flag not in takes]
  if extra:
    raise WeightsError(f'{name} does not take {", ".join(extra)} (it takes {", ".join(f"--{f}" for f in takes)})')
  if name == 'import':
    return import_weights(values['format'], values['model'], values['input'], values['output'])
  return export_weights(values['format'], values['checkpoint'], values['output'], bool(values.get('ema')))


def command(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """argv: the program name and the command (import or export); the flags as parsed. Prints what was written."""
  if len(argv) != 2:
    given = f'got {argv[1:]}' if argv[1:] else 'none was given'
    raise WeightsError(f'expected one command ({given}); valid choices: {list(COMMANDS)}')
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  names = {flag for table in (COMMANDS, SWITCHES) for flags_of_command in table.values() for flag in flags_of_command}
  print(f'Wrote {run(argv[1], {flag: flag_values[flag].value for flag in sorted(names)})}')


def main(args: list[str]) -> int:
  """`python -m vlp_jax.weights ARGS` in this process (scripts and tests): the exit code, with the messages on
  stderr as on the command line (cli/common.py `run_in_process`)."""
  return common.run_in_process(command, define_flags, ['vlp_jax.weights', *args], takes_arguments=True)


def run_command() -> None:
  """The command line: `python -m vlp_jax.weights import|export --flag=... ...`."""
  common.run(command, define_flags, takes_arguments=True)


if __name__ == '__main__':
  run_command()
