"""Weight interchange as checkpoints: a state dict of OpenAI CLIP, open_clip, Hugging Face transformers or big_vision
(SigLIP's .npz) imported into a new vlp_jax checkpoint, and a checkpoint's towers exported as open_clip, Hugging Face
or big_vision files. The naming and
config rules are models/interchange/; this module adds what needs the full config and the checkpoints (the layer
above training/), for the weights command (cli/weights_command.py) and for scripts and tests, which find the rules'
`WeightsError` and `read_state_dict` here too.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from safetensors.numpy import save_file

from vlp_jax import errors, models, paths
from vlp_jax.checkpoint_files import load_variables, resolve_checkpoint
from vlp_jax.config import base_config
from vlp_jax.data.image import image_ops
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.data.text.gemma_sentencepiece import GEMMA_FILENAME
from vlp_jax.data.text.siglip_sentencepiece import SPIECE_FILENAME, resolve_tokenizer_file
from vlp_jax.data.text.tokenizer_factory import CLIP_BPE, GEMMA, tokenizer_options
from vlp_jax.models.interchange import (WeightsError, big_vision_problem, big_vision_to_openai, check_hf_config,
                                        clip_tokenizer_files, expected_variables, hf_config, hf_input_files,
                                        hf_matching_presets, hf_siglip2_config, hf_siglip_config, hf_to_openai,
                                        model_config_for, naflex_preprocessing_from_hf, open_clip_config_problem,
                                        open_clip_model_config, open_clip_preprocess_arguments,
                                        open_clip_siglip_to_openai, openai_to_big_vision, openai_to_hf,
                                        openai_to_open_clip_siglip, openai_to_variables, preprocessing_from_hf,
                                        preprocessor_config, read_hf_config, read_state_dict, siglip2_model_config,
                                        siglip2_tokenizer_files, siglip_mismatches, siglip_model_config,
                                        siglip_tokenizer_files, variables_to_openai)
from vlp_jax.models.transformer import unstacked_layout
from vlp_jax.training.checkpoint import load_config

IMPORT_FORMATS = ('openai', 'open_clip', 'hf', 'big_vision')
EXPORT_FORMATS = ('open_clip', 'hf', 'big_vision')


def _note(message: str) -> None:
  print(f'note: {message}', file=sys.stderr, flush=True)


def save_checkpoint(path: str, params: dict, model_state: dict, config: ml_collections.ConfigDict) -> str:
  """An orbax checkpoint directory with `state` ({step, params, model_state}) and the full `config`, written
  atomically; `checkpoint_files.load_variables`, `training.checkpoint.load_config` and every vlp_jax command read
  it like a training step directory. `path` may be on Google Cloud Storage (gs://, written by orbax through
  tensorstore); another object store is refused, as for a workdir."""
  path = paths.absolute(path)
  if problem := paths.checkpoint_location_problem(path):
    raise WeightsError(f'--output={path}: {problem}')
  if paths.exists(path):
    raise WeightsError(f'{path} exists; choose a new --output (nothing was overwritten)')
  checkpointer = ocp.Checkpointer(ocp.CompositeCheckpointHandler('state', 'config'))
  checkpointer.save(path, args=ocp.args.Composite(
      state=ocp.args.StandardSave({'step': np.zeros((), np.int32), 'params': params, 'model_state': model_state}),
      config=ocp.args.JsonSave(config.to_dict())))
  checkpointer.close()
  return path


def _json_file(folder: str, name: str) -> dict | None:
  """The JSON object in `folder`/`name` as a dict, or None when there is none."""
  path = os.path.join(folder, name)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      config = json.load(f)
  except (OSError, ValueError) as error:
    raise WeightsError(f'{path} could not be read as JSON: {error}') from None
  return config if isinstance(config, dict) else None


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
  if hf.get('model_type') in ('siglip', 'siglip2'):  # SiglipModel, or Siglip2Model (NaFlex)
    tokenizer_config = _json_file(os.path.dirname(config_path), 'tokenizer_config.json')
    described = (siglip2_model_config if hf['model_type'] == 'siglip2' else siglip_model_config)(hf, tokenizer_config)
    if name is None:
      return described
    model_config = model_config_for(name, 'hf')
    mismatches = siglip_mismatches(described, model_config)
    if model_config.vision.type != 'siglip_vit' or mismatches:
      model_class = 'Siglip2Model' if hf['model_type'] == 'siglip2' else 'SiglipModel'
      lines = [f'{config_path} describes a {model_class} that does not match --model={name}:']
      lines += [f'  {field}: file {got!r}, --model={name} {want!r}' for field, got, want in mismatches]
      fits = described.name if described.name in models.PRESETS else None
      lines.append(f'Use --model={fits}, which matches the file.' if fits else
                   'Leave out --model to import the model the file describes.')
      raise WeightsError('\n'.join(lines))
    if hf['model_type'] == 'siglip2':  # the preset's towers, run as the file's NaFlex model
      model_config.vision.naflex = True
      model_config.preprocess = described.preprocess
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
  `name` the model is the one the config.json describes: a transformers CLIPModel (a preset it fits),
  SiglipModel (any size) or Siglip2Model (NaFlex: a siglip_vit model with `vision.naflex`, its patch budget read from
  the folder's preprocessor_config.json). A SigLIP import records the SentencePiece file found beside the weights (spiece.model or
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
  if fmt == 'big_vision' and (problem := big_vision_problem(model_config)):
    raise WeightsError(f'--format=big_vision reads big_vision\'s SigLIP and SigLIP 2 files, and --model={name} is not '
                       f'such a model: {problem}; valid choices: '
                       f'{sorted(n for n in models.PRESETS if not big_vision_problem(models.preset(n)))}')
  if fmt == 'big_vision' and not input_path.endswith('.npz'):
    raise WeightsError(f'import --format=big_vision --input={input_path}: big_vision\'s files end in .npz')
  if siglip and fmt == 'openai':
    raise WeightsError(f'--model={name} is a SigLIP model, and OpenAI released no SigLIP weights; import its '
                       'weights with --format=open_clip or --format=hf')
  if siglip:
    folder = os.path.dirname(os.path.abspath(input_path))
    gemma = model_config.text.tokenizer == GEMMA  # SigLIP 2: Gemma's tokenizer.model, which is all it reads
    try:  # the spiece.model or tokenizer.json beside the weights
      model_config.text.tokenizer_path = (os.path.join(folder, GEMMA_FILENAME) if gemma else
                                          resolve_tokenizer_file(folder))
    except errors.ConfigError:
      model_config.text.tokenizer_path = ''
    if not os.path.isfile(model_config.text.tokenizer_path):
      model_config.text.tokenizer_path = ''
      _note(f'no {GEMMA_FILENAME if gemma else "spiece.model or tokenizer.json"} beside {input_path}: set '
            '--config.model.text.tokenizer_path to the SentencePiece file of these weights when training or '
            'evaluating')
  if fmt == 'hf' and model_config.vision.get('naflex', False):
    preprocessing, model_config.vision.max_patches = _hf_naflex_preprocessing(input_path, model_config)
    model_config.preprocess = preprocessing.config()
  elif fmt == 'hf':
    model_config.preprocess = _hf_preprocessing(input_path, model_config).config()
  state_dict = read_state_dict(input_path)
  if fmt == 'hf':
    state_dict = hf_to_openai(state_dict, siglip=siglip)
  elif fmt == 'big_vision':
    state_dict = big_vision_to_openai(state_dict)
  elif siglip:
    state_dict = open_clip_siglip_to_openai(state_dict)
  params, model_state = openai_to_variables(state_dict, model_config)
  config = base_config()
  config.model = model_config
  return save_checkpoint(output, params, model_state, config)


def _hf_preprocessing(weights_path: str, model_config: ml_collections.ConfigDict) -> image_ops.ImagePreprocessing:
  """The preprocessing of a Hugging Face model: its folder's preprocessor_config.json when it has one, else its
  family's (transformers' defaults for a CLIPModel or a SiglipModel, the preset's)."""
  folder = os.path.dirname(os.path.abspath(weights_path))
  family = image_ops.preprocessing_of(model_config)
  processor = _json_file(folder, 'preprocessor_config.json')
  if processor is None:
    return family
  return preprocessing_from_hf(processor, os.path.join(folder, 'preprocessor_config.json'),
                               model_config.vision.image_size, family)


def _hf_naflex_preprocessing(weights_path: str, model_config: ml_collections.ConfigDict
                             ) -> tuple[image_ops.ImagePreprocessing, int]:
  """(the preprocessing, the patch budget) of a NaFlex Hugging Face model: its folder's preprocessor_config.json
  (a Siglip2ImageProcessor's) when it has one, else the model config's own."""
  folder = os.path.dirname(os.path.abspath(weights_path))
  family = image_ops.preprocessing_of(model_config)
  processor = _json_file(folder, 'preprocessor_config.json')
  if processor is None:
    return family, model_config.vision.max_patches
  return naflex_preprocessing_from_hf(processor, os.path.join(folder, 'preprocessor_config.json'),
                                      model_config.vision.patch_size, family)


def _check_output(output: str, overwrite: bool) -> None:
  if (paths.exists(output) if paths.is_remote(output) else os.path.lexists(output)) and not overwrite:
    raise WeightsError(f'{output} exists; pass --overwrite to replace it')


def open_clip_config_path(output: str) -> str:
  """The open_clip model config written beside an open_clip export `output` (X.safetensors -> X.json): open_clip
  registers it as model X with `open_clip.add_model_config(path)`."""
  return output[:-len('.safetensors')] + '.json'


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _respect_umask(path: str) -> None:
  """Give `path` (a file, or a folder and everything in it) the modes a newly created one gets under the umask:
  safetensors writes 0600 files and tempfile makes 0700 folders, which other users could not read."""
  mask = _umask()
  os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~mask)
  for folder, names, files in os.walk(path):
    for name in names:
      os.chmod(os.path.join(folder, name), 0o777 & ~mask)
    for name in files:
      os.chmod(os.path.join(folder, name), 0o666 & ~mask)


def _move_into_place(staged: str, output: str) -> None:
  """Rename `staged` (a complete file or folder) to `output`, replacing what is there."""
  if not os.path.lexists(output) or not (os.path.isdir(output) or os.path.isdir(staged)):
    os.replace(staged, output)  # atomic
    return
  # Nothing can be renamed over a folder: the old one goes aside, the new one in, then the old one is deleted.
  aside = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(output)), prefix=f'.{os.path.basename(output)}.old-')
  old = os.path.join(aside, 'old')
  os.rename(output, old)
  try:
    os.rename(staged, output)
  except OSError:
    os.rename(old, output)  # nothing is lost
    raise
  shutil.rmtree(aside, ignore_errors=True)


def _upload(staged: str, output: str) -> None:
  """Copy `staged` (a complete local file or folder) to `output` on an object store, file by file (an object store
  cannot rename: each object appears whole when its upload ends). Files of an earlier export that this one does not
  write are left in place."""
  if not os.path.isdir(staged):
    paths.upload(staged, output)
    return
  for folder, _, files in os.walk(staged):
    for name in sorted(files):
      local = os.path.join(folder, name)
      paths.upload(local, paths.join(output, *os.path.relpath(local, staged).split(os.sep)))


def _hf_tokenizer_files(model_config: ml_collections.ConfigDict) -> tuple[dict[str, str | bytes], str | None]:
  """({file name: content} of the model's transformers tokenizer, why there is none or None)."""
  text = model_config.text
  if tokenizer_options(text)['tokenizer'] == CLIP_BPE:
    return clip_tokenizer_files(*default_tokenizer().vocabulary(), text.context_length), None
  try:
    path = resolve_tokenizer_file(text.get('tokenizer_path', '') or '')
  except errors.ConfigError:
    return {}, (f'config.model.text.tokenizer_path={text.get("tokenizer_path", "")!r} names no SentencePiece file on '
                'this machine')
  if path.endswith('.json'):
    return {}, (f'the model\'s tokenizer is {path}, a tokenizer.json, and transformers\' SiglipTokenizer reads only '
                'the spiece.model it was converted from')
  with open(path, 'rb') as f:
    if tokenizer_options(text)['tokenizer'] == GEMMA:
      return {GEMMA_FILENAME: f.read(), **siglip2_tokenizer_files(text.context_length)}, None
    return {SPIECE_FILENAME: f.read(), **siglip_tokenizer_files(text.context_length)}, None


def _write_hf_folder(folder: str, state_dict: dict[str, np.ndarray], model_config: ml_collections.ConfigDict
                     ) -> str | None:
  """A transformers model folder: weights, config.json, tokenizer and preprocessor files. Returns why the tokenizer
  files are missing, or None."""
  siglip = model_config.vision.type == 'siglip_vit'
  naflex = siglip and model_config.vision.get('naflex', False)  # a Siglip2Model
  save_file(openai_to_hf(state_dict, siglip=siglip, naflex=naflex), os.path.join(folder, 'model.safetensors'),
            metadata={'format': 'pt'})
  tokenizer_files, missing = _hf_tokenizer_files(model_config)
  model_json = (hf_siglip2_config if naflex else hf_siglip_config if siglip else hf_config)(model_config)
  files = {'config.json': json.dumps(model_json, indent=2),
           'preprocessor_config.json': json.dumps(preprocessor_config(model_config), indent=2),
           **tokenizer_files}
  for name, content in files.items():
    with open(os.path.join(folder, name), 'wb' if isinstance(content, bytes) else 'w') as f:
      f.write(content)
  return missing


def export_weights(fmt: str, checkpoint: str, output: str, ema: bool = False, overwrite: bool = False) -> str:
  """Export the two towers of `checkpoint` (a step directory, an imported checkpoint or a workdir) as files that the
  target library's own loaders read as they are, at `output`:

    open_clip: the weights X.safetensors and, for a CLIP model, open_clip's model config X.json beside them
      (`open_clip.add_model_config('X.json'); open_clip.create_model('X', pretrained='X.safetensors')`);
    hf: a transformers model folder: model.safetensors, config.json, the tokenizer's files and
      preprocessor_config.json (`CLIPModel.from_pretrained(folder)`, `CLIPProcessor.from_pretrained(folder)`);
    big_vision: a SigLIP or SigLIP 2 model as big_vision's two-tower X.npz (models/interchange/big_vision.py), for
      `two_towers.load(None, 'X.npz', model_cfg)` with the model config of its released files.

  An existing `output` is refused unless `overwrite`; everything is written to a temporary path first and renamed
  into place, so a failure leaves what was there. Files get the modes the umask gives new files. An `output` on an
  object store (gs://bucket/...) is written locally first, then uploaded file by file. With `ema`, the
  towers of the checkpoint's EMA of the weights (config.ema.decay) instead of its parameters.
  """
  if fmt not in EXPORT_FORMATS:
    raise WeightsError(f"export --format={fmt} is not valid; valid choices: {list(EXPORT_FORMATS)}")
  output = output.rstrip(os.sep) or output  # 'hf_model/' names the folder hf_model
  if fmt == 'open_clip' and not output.endswith('.safetensors'):
    raise WeightsError(f'export --format=open_clip --output={output} must end in .safetensors (open_clip reads '
                       'other names as torch files)')
  if fmt == 'big_vision' and not output.endswith('.npz'):
    raise WeightsError(f'export --format=big_vision --output={output} must end in .npz (big_vision reads numpy '
                       'files by that name)')
  _check_output(output, overwrite)
  checkpoint = resolve_checkpoint(checkpoint)
  config = load_config(checkpoint)
  siglip = config.model.vision.type == 'siglip_vit'
  config_problem = open_clip_config_problem(config.model) if fmt == 'open_clip' else None
  if fmt == 'open_clip' and not config_problem:
    _check_output(open_clip_config_path(output), overwrite)
  if fmt == 'big_vision' and (problem := big_vision_problem(config.model)):
    raise WeightsError(f'export --format=big_vision: {problem}')
  if fmt == 'hf' and config.model.vision.type not in ('vit', 'siglip_vit'):
    raise WeightsError('transformers has no CLIPModel for ResNet towers; export RN models with --format=open_clip')
  params, model_state = load_variables(checkpoint, ema=ema)
  # Only the two towers go out: objective heads (SimCLR, COSMOS cross-attention, SigLIP's bias, an EMA teacher)
  # have no place in an open_clip or transformers CLIP.
  towers = {path[0] for path in expected_variables(config.model)['params']}
  params = unstacked_layout({k: v for k, v in params.items() if k in towers})  # weight files name every block
  model_state = {k: v for k, v in model_state.items() if k == 'batch_stats'}
  state_dict = variables_to_openai(params, model_state)
  if paths.is_remote(output):  # staged in the temporary folder, then uploaded
    staging = tempfile.mkdtemp(prefix=f'.{paths.basename(output)}.tmp-')
  else:  # staged beside the output, so that it is renamed into place
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=f'.{os.path.basename(output)}.tmp-')
  try:
    if fmt == 'big_vision':
      weights = os.path.join(staging, 'weights.npz')
      np.savez(weights, **openai_to_big_vision(state_dict, config.model))
      staged = {weights: output}
      _note(f'{output} holds the weights only: big_vision reads its model config (variant, pool_type=\'map\', '
            'vocab_size, out_dim) and the tokenizer from the experiment config')
    elif fmt == 'open_clip':
      weights = os.path.join(staging, 'weights.safetensors')
      save_file(openai_to_open_clip_siglip(state_dict) if siglip else state_dict, weights)
      staged = {weights: output}
      if (preprocess := open_clip_preprocess_arguments(config.model)) != open_clip_preprocess_arguments({}):
        _note(f'open_clip reads no preprocessing from a weights file; give it this model\'s: '
              f'open_clip.create_model_and_transforms(..., {", ".join(f"{k}={v!r}" for k, v in preprocess.items())})')
      if config_problem:
        _note(f'no open_clip model config written beside {output}: {config_problem}')
      else:
        model_json = os.path.join(staging, 'model.json')
        with open(model_json, 'w') as f:
          json.dump(open_clip_model_config(config.model), f, indent=2)
        staged[model_json] = open_clip_config_path(output)
    else:
      if image_ops.preprocessing_of(config.model).crop_offset == 'round':
        _note('transformers\' image processors start a centre crop with an odd margin half a pixel earlier than '
              'torchvision, which these weights were preprocessed with: images whose crop margin is odd come out '
              'shifted by one pixel')
      folder = os.path.join(staging, 'hf')
      os.makedirs(folder)
      if missing := _write_hf_folder(folder, state_dict, config.model):
        _note(f'{output} has no tokenizer files ({SPIECE_FILENAME}, tokenizer_config.json, special_tokens_map.json): '
              f'{missing}; copy the spiece.model of these weights into it, with a tokenizer_config.json naming '
              'SiglipTokenizer')
      staged = {folder: output}
    for path in staged:
      _respect_umask(path)
    for path, final in staged.items():
      (_upload if paths.is_remote(final) else _move_into_place)(path, final)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return output
