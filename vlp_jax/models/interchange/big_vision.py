"""big_vision's two-tower `.npz` files (the released SigLIP and SigLIP 2 checkpoints) <-> our OpenAI-style names.

A file holds the flattened Flax parameters of big_vision's two-tower model, '/'-joined, usually under `params/`:
`img/` a ViT with a MAP head and no classifier, `txt/` its text transformer with a `head` projection, `t` the log
temperature and `b` the bias, each [1]. Attention kernels keep their heads apart (query/key/value [w, H, w/H], out
[H, w/H, w]); a tower's blocks are either `encoderblock_{i}` each or one `encoderblock` stacked on a leading axis (a
model trained with `scan=True`). Import reads either layout; export writes the one each family's checkpoints were
released in (see `big_vision_stacked`).
"""
from __future__ import annotations

import re

import ml_collections
import numpy as np

from vlp_jax.data.text.tokenizer_factory import GEMMA
from vlp_jax.models.interchange.files import WeightsError

# Modules by kind: (big_vision module, our module, kind). A kind says how the leaves convert (`_LEAVES`).
_MODULES = (
    ('img/embedding', 'visual.conv1', 'conv'),
    ('img/Transformer/encoder_norm', 'visual.ln_post', 'ln'),
    ('img/MAPHead_0/MultiHeadDotProductAttention_0', 'visual.attn_pool.attn', 'attn'),
    ('img/MAPHead_0/LayerNorm_0', 'visual.attn_pool.ln', 'ln'),
    ('img/MAPHead_0/MlpBlock_0/Dense_0', 'visual.attn_pool.mlp.c_fc', 'dense'),
    ('img/MAPHead_0/MlpBlock_0/Dense_1', 'visual.attn_pool.mlp.c_proj', 'dense'),
    ('txt/Encoder_0/encoder_norm', 'ln_final', 'ln'),
)
# Inside a block (`encoderblock_{i}` of each tower's encoder).
_BLOCK_MODULES = (('LayerNorm_0', 'ln_1', 'ln'), ('MultiHeadDotProductAttention_0', 'attn', 'attn'),
                  ('LayerNorm_1', 'ln_2', 'ln'), ('MlpBlock_0/Dense_0', 'mlp.c_fc', 'dense'),
                  ('MlpBlock_0/Dense_1', 'mlp.c_proj', 'dense'))
_ENCODERS = (('img/Transformer', 'visual.transformer.resblocks'), ('txt/Encoder_0', 'transformer.resblocks'))
# Single parameters: (big_vision name, our name); the leading [1] axes of big_vision's go.
_PARAMS = (('img/pos_embedding', 'visual.positional_embedding'), ('img/MAPHead_0/probe', 'visual.attn_pool.probe'),
           ('txt/Embed_0/embedding', 'token_embedding.weight'), ('txt/pos_embedding', 'positional_embedding'),
           ('txt/head/kernel', 'text_projection'), ('txt/head/bias', 'text_projection_bias'),
           ('t', 'logit_scale'), ('b', 'logit_bias'))
# Leaves of a module kind: (big_vision leaf, our leaf).
_LEAVES = {'conv': (('kernel', 'weight'), ('bias', 'bias')), 'dense': (('kernel', 'weight'), ('bias', 'bias')),
           'ln': (('scale', 'weight'), ('bias', 'bias'))}
_QKV = ('query', 'key', 'value')
_STACKED_BLOCK = re.compile(r'^(.*)/encoderblock/(.*)$')
_BLOCK = re.compile(r'^(.*)/encoderblock_(\d+)/(.*)$')


def _modules() -> list[tuple[str, str, str, str, str]]:
  """Every module as (big_vision pattern, big_vision template, our pattern, our template, kind): a block's index is
  the pattern's group, `\\1` in the template."""
  out = [(re.escape(bv), bv, re.escape(ours), ours, kind) for bv, ours, kind in _MODULES]
  for bv_encoder, our_blocks in _ENCODERS:
    for bv, ours, kind in _BLOCK_MODULES:
      bv_name, our_name = f'{bv_encoder}/encoderblock_{{}}/{bv}', f'{our_blocks}.{{}}.{ours}'
      out.append((re.escape(bv_name).replace(r'\{\}', '{}').format(r'(\d+)'), bv_name.format(r'\1'),
                  re.escape(our_name).replace(r'\{\}', '{}').format(r'(\d+)'), our_name.format(r'\1'), kind))
  return out


def _unstacked(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """`.../encoderblock/...` stacked on a leading [L] axis -> `.../encoderblock_{i}/...` each."""
  out = {}
  for key, value in arrays.items():
    if match := _STACKED_BLOCK.match(key):
      for i in range(value.shape[0]):
        out[f'{match.group(1)}/encoderblock_{i}/{match.group(2)}'] = value[i]
    else:
      out[key] = value
  return out


def _place(key: str, modules: list[tuple[str, str, str, str, str]]) -> tuple[str, str, str] | None:
  """(our module, kind, big_vision leaf) of a big_vision name, the leaf being `query/kernel` and the like for an
  attention; None when no module of a SigLIP model has it."""
  for bv, _, _, ours, kind in modules:
    if match := re.fullmatch(f'{bv}/(.+)', key):
      leaf = match.group(match.re.groups)
      known = ([f'{p}/{l}' for p in (*_QKV, 'out') for l in ('kernel', 'bias')] if kind == 'attn' else
               [bv_leaf for bv_leaf, _ in _LEAVES[kind]])
      return (match.expand(ours), kind, leaf) if leaf in known else None
  return None


def big_vision_to_openai(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """A big_vision two-tower file's arrays {'params/img/...': array} -> our OpenAI-style names (the names
  `variables_to_openai` gives). WeightsError lists the names it cannot place."""
  if any(key.startswith('params/') for key in arrays):  # a training checkpoint's optimizer state is not needed
    arrays = {key[len('params/'):]: value for key, value in arrays.items() if key.startswith('params/')}
  arrays = _unstacked(arrays)
  if 'txt/Encoder_0/pos_embedding' in arrays and 'txt/pos_embedding' in arrays:  # older files added it twice
    arrays['txt/pos_embedding'] = arrays['txt/pos_embedding'] + arrays.pop('txt/Encoder_0/pos_embedding')
  params, modules = dict(_PARAMS), _modules()
  out, attention, unknown = {}, {}, []
  for key, value in arrays.items():
    if key in params:
      name = params[key]
      out[name] = (value.reshape(()) if name in ('logit_scale', 'logit_bias') else
                   value.reshape(value.shape[1:]) if key.endswith('pos_embedding') else value)
    elif (place := _place(key, modules)) is None:
      unknown.append(key)
    elif place[1] == 'attn':
      attention.setdefault(place[0], {})[place[2]] = value
    else:
      module, kind, leaf = place
      if kind == 'conv' and leaf == 'kernel':
        value = value.transpose(3, 2, 0, 1)  # [kh, kw, in, out] -> torch's [out, in, kh, kw]
      elif kind == 'dense' and leaf == 'kernel':
        value = value.T
      out[f'{module}.{dict(_LEAVES[kind])[leaf]}'] = value
  if unknown:
    raise WeightsError(f'{len(unknown)} names of the big_vision file have no place in a SigLIP model: '
                       + ', '.join(unknown[:40]))
  for module, parts in attention.items():
    missing = [f'{p}/{l}' for p in (*_QKV, 'out') for l in ('kernel', 'bias') if f'{p}/{l}' not in parts]
    if missing:
      raise WeightsError(f'the big_vision file lacks {missing} of the attention that becomes our {module}')
    width = parts['query/kernel'].shape[0]
    # [w, H, w/H] per projection -> torch's packed [3w, w]: the q, k then v rows of (out, in)
    out[f'{module}.in_proj_weight'] = np.concatenate([parts[f'{p}/kernel'].reshape(width, -1).T for p in _QKV])
    out[f'{module}.in_proj_bias'] = np.concatenate([parts[f'{p}/bias'].reshape(-1) for p in _QKV])
    out[f'{module}.out_proj.weight'] = parts['out/kernel'].reshape(-1, parts['out/kernel'].shape[-1]).T
    out[f'{module}.out_proj.bias'] = parts['out/bias']
  return {key: np.ascontiguousarray(value) if value.ndim else value for key, value in out.items()}


def big_vision_problem(model_config: ml_collections.ConfigDict) -> str | None:
  """Why big_vision's two-tower SigLIP layout cannot hold `model_config`'s towers, or None when it can."""
  text = model_config.text
  if model_config.vision.type != 'siglip_vit':
    return (f"config.model.vision.type={model_config.vision.type!r}: big_vision's SigLIP files hold a ViT with a MAP "
            "head and no projection (vision.type 'siglip_vit')")
  if text.causal or text.pool != 'last' or not text.proj_bias:
    return ('big_vision\'s SigLIP text tower is bidirectional, pooled at its last token and projected with a bias; '
            f'this one has causal={text.causal}, pool={text.pool!r}, proj_bias={text.proj_bias}')
  return None


def big_vision_stacked(model_config: ml_collections.ConfigDict) -> bool:
  """Whether an export stacks each tower's blocks as one `encoderblock` (SigLIP 2, whose released files and demo
  config use big_vision's `scan=True`, and whose text tower loads without converting layouts) or names them
  `encoderblock_{i}` (SigLIP's released files, loaded with `scan=False`)."""
  return model_config.text.tokenizer == GEMMA


def openai_to_big_vision(state_dict: dict[str, np.ndarray], model_config: ml_collections.ConfigDict
                         ) -> dict[str, np.ndarray]:
  """Inverse of `big_vision_to_openai`, under `params/` as the released files: a SigLIP model's state dict
  (`variables_to_openai`'s, towers only) -> big_vision's names, blocks stacked as `big_vision_stacked` says."""
  if problem := big_vision_problem(model_config):
    raise WeightsError(f'no big_vision file for this model: {problem}')
  heads = {'img': model_config.vision.heads, 'txt': model_config.text.heads}
  params = {ours: bv for bv, ours in _PARAMS}
  modules = _modules()
  out = {}
  for key, value in state_dict.items():
    if key in params:
      name = params[key]
      out[name] = (value.reshape(1) if name in ('t', 'b') else
                   value[None] if name.endswith('pos_embedding') else value)
      continue
    module, leaf = key.rsplit('.', 1)
    if module.endswith('.out_proj'):  # an attention's output projection: big_vision's `out` of that attention
      module = module[:-len('.out_proj')]
    for _, bv, ours, _, kind in modules:
      if match := re.fullmatch(ours, module):
        break
    else:
      raise WeightsError(f'{key} has no place in a big_vision SigLIP file')
    target = match.expand(bv)
    if kind == 'attn':
      count = heads[target.split('/', 1)[0]]
      if leaf == 'in_proj_weight':  # torch's packed [3w, w] -> [w, H, w/H] per projection
        width = value.shape[1]
        for part, rows in zip(_QKV, np.split(value, 3)):
          out[f'{target}/{part}/kernel'] = rows.T.reshape(width, count, width // count)
      elif leaf == 'in_proj_bias':
        for part, rows in zip(_QKV, np.split(value, 3)):
          out[f'{target}/{part}/bias'] = rows.reshape(count, -1)
      elif leaf == 'weight':  # out_proj [w_out, w_in] -> [H, w_in/H, w_out]
        out[f'{target}/out/kernel'] = value.T.reshape(count, -1, value.shape[0])
      else:
        out[f'{target}/out/bias'] = value
      continue
    names = {ours_leaf: bv_leaf for bv_leaf, ours_leaf in _LEAVES[kind]}
    if kind == 'conv' and leaf == 'weight':
      value = value.transpose(2, 3, 1, 0)  # torch's [out, in, kh, kw] -> [kh, kw, in, out]
    elif kind == 'dense' and leaf == 'weight':
      value = value.T
    out[f'{target}/{names[leaf]}'] = value
  if big_vision_stacked(model_config):
    out = _stacked(out)
  return {f'params/{key}': np.ascontiguousarray(value) for key, value in out.items()}


def _stacked(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Inverse of `_unstacked`: `.../encoderblock_{i}/...` -> one `.../encoderblock/...` stacked in block order."""
  out, blocks = {}, {}
  for key, value in arrays.items():
    if match := _BLOCK.match(key):
      blocks.setdefault(f'{match.group(1)}/encoderblock/{match.group(3)}', {})[int(match.group(2))] = value
    else:
      out[key] = value
  for key, by_index in blocks.items():
    out[key] = np.stack([by_index[i] for i in range(len(by_index))])
  return out
