"""Weight interchange as checkpoints: a state dict of OpenAI CLIP, open_clip or Hugging Face transformers imported
into a new vlp_jax checkpoint, and a checkpoint's towers exported as open_clip or Hugging Face files. The naming and
config rules are models/interchange/; this module adds what needs the full config and the checkpoints (the layer
above training/), for the weights command (cli/weights.py) and for scripts and tests, which find the rules'
`WeightsError` and `read_state_dict` here too.
"""
from __future__ import annotations

import json
import os
import sys

import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from safetensors.numpy import save_file

from vlp_jax import errors, models
from vlp_jax.checkpoint_files import load_variables, resolve_checkpoint
from vlp_jax.config import base_config
from vlp_jax.data.tokenizer import resolve_tokenizer_file
from vlp_jax.models.interchange import (WeightsError, check_hf_config, expected_variables, hf_config, hf_input_files,
                                        hf_matching_presets, hf_siglip_config, hf_to_openai, model_config_for,
                                        open_clip_siglip_to_openai, openai_to_hf, openai_to_open_clip_siglip,
                                        openai_to_variables, read_hf_config, read_state_dict, siglip_mismatches,
                                        siglip_model_config, variables_to_openai)
from vlp_jax.models.transformer import unstacked_layout
from vlp_jax.training.checkpoint import load_config

IMPORT_FORMATS = ('openai', 'open_clip', 'hf')
EXPORT_FORMATS = ('open_clip', 'hf')


def _note(message: str) -> None:
  print(f'note: {message}', file=sys.stderr, flush=True)


def save_checkpoint(path: str, params: dict, model_state: dict, config: ml_collections.ConfigDict) -> str:
  """An orbax checkpoint directory with `state` ({step, params, model_state}) and the full `config`, written
  atomically; `checkpoint_files.load_variables`, `training.checkpoint.load_config` and every vlp_jax command read
  it like a training step directory."""
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
