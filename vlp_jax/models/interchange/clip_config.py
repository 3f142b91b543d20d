"""transformers' `CLIPConfig` (a CLIPModel's config.json) <-> our model config: the config.json an export writes,
the files of a Hugging Face model folder, and every field on which a config.json and a preset disagree (an import
checks them, activation included, before reading any weights)."""
from __future__ import annotations

import json
import os
from typing import Any

import ml_collections

from vlp_jax import errors, models
from vlp_jax.models.interchange.files import WeightsError
from vlp_jax.models.interchange.openai import model_config_for

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
  """A transformers CLIPModel (or SiglipModel, Siglip2Model) config.json as a dict; WeightsError if it is unreadable
  or none of those."""
  try:
    with open(path, encoding='utf-8') as f:
      hf = json.load(f)
  except (OSError, ValueError) as error:
    raise WeightsError(f'{path} could not be read as JSON: {error}') from None
  if not isinstance(hf, dict) or hf.get('model_type', 'clip') not in ('clip', 'siglip', 'siglip2'):
    kind = hf.get('model_type') if isinstance(hf, dict) else type(hf).__name__
    raise WeightsError(f"{path} describes a {kind!r} model; --format=hf imports a transformers CLIPModel "
                       "(model_type 'clip'), SiglipModel (model_type 'siglip') or Siglip2Model (model_type 'siglip2')")
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
