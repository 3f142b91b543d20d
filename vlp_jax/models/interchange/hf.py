"""Hugging Face state dicts (transformers' `CLIPModel`, `SiglipModel`, `Siglip2Model`) <-> OpenAI names: the fixed names by table,
the blocks by rule (named as CLIPModel's in both), q/k/v projections packed into OpenAI's `in_proj`, projections
transposed. SigLIP's parts take our names (models/siglip_vit.py)."""
from __future__ import annotations

import math
import re

import numpy as np

from vlp_jax.models.interchange.files import WeightsError

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

# SiglipModel's names (its blocks are named as CLIPModel's).
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


_HF_PATCH_EMBEDDING = 'vision_model.embeddings.patch_embedding.weight'


def _linear_to_conv_patch_embedding(weight: np.ndarray) -> np.ndarray:
  """Siglip2Model's patch embedding, a Linear [w, P*P*3] over patches flattened as (row, column, channel) -> the
  conv weight [w, 3, P, P] that SiglipModel and OpenAI store (the same map)."""
  patch_size = math.isqrt(weight.shape[1] // 3)
  if 3 * patch_size * patch_size != weight.shape[1]:
    raise WeightsError(f'{_HF_PATCH_EMBEDDING} has shape {weight.shape}: its inputs are not P*P*3 pixels')
  return weight.reshape(weight.shape[0], patch_size, patch_size, 3).transpose(0, 3, 1, 2)


def hf_to_openai(state_dict: dict[str, np.ndarray], siglip: bool = False) -> dict[str, np.ndarray]:
  """transformers CLIPModel names (SiglipModel's or Siglip2Model's with `siglip`: a Siglip2Model's patch embedding
  is a 2-D Linear weight) -> OpenAI names (ours, for the SigLIP parts); q/k/v are packed into in_proj, projections
  transposed."""
  if siglip and np.ndim(state_dict.get(_HF_PATCH_EMBEDDING)) == 2:
    state_dict = {**state_dict, _HF_PATCH_EMBEDDING: _linear_to_conv_patch_embedding(state_dict[_HF_PATCH_EMBEDDING])}
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


def openai_to_hf(state_dict: dict[str, np.ndarray], siglip: bool = False, naflex: bool = False
                 ) -> dict[str, np.ndarray]:
  """Inverse of `hf_to_openai`; `naflex`: Siglip2Model's names (its patch embedding a Linear [w, P*P*3])."""
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
  if naflex and _HF_PATCH_EMBEDDING in out:  # [w, 3, P, P] -> Siglip2Model's Linear [w, P*P*3]
    weight = out[_HF_PATCH_EMBEDDING]
    out[_HF_PATCH_EMBEDDING] = np.array(weight.transpose(0, 2, 3, 1).reshape(weight.shape[0], -1), order='C')
  return out
