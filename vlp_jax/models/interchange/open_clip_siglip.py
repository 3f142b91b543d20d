"""open_clip's SigLIP state dicts (`ViT-B-16-SigLIP` and kin) <-> our OpenAI-style names, by the rules below."""
from __future__ import annotations

import re

import numpy as np

from vlp_jax.models.interchange.files import WeightsError

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
