"""Weight interchange with OpenAI CLIP, open_clip, Hugging Face transformers and big_vision (SigLIP's .npz).

  python -m vlp_jax.weights import --format={openai,open_clip,hf,big_vision} [--model=NAME] --input=FILE --output=CKPT
  python -m vlp_jax.weights export --format={open_clip,hf,big_vision} --checkpoint=CKPT --output=FILE [--ema]
      [--overwrite]

Our parameter names are OpenAI's (see models/clip_model.py), so OpenAI and open_clip state dicts map by rule:
  - a numeric key component joins the previous one: `resblocks.0` <-> `resblocks_0`, `layer1.0` <-> `layer1_0`;
  - conv `weight` [O, I, kh, kw] <-> `kernel` [kh, kw, I, O]; linear `weight` [O, I] <-> `kernel` [I, O];
    `in_proj_weight` / `in_proj_bias` <-> `in_proj/kernel` / `in_proj/bias`; LayerNorm/BatchNorm `weight` <-> `scale`;
  - BatchNorm `running_mean` / `running_var` <-> model state `batch_stats/.../mean` / `var`;
  - everything else (class_embedding, positional_embedding, proj, text_projection, logit_scale) keeps its name.
Hugging Face `CLIPModel` names are translated to OpenAI's first (q/k/v projections packed into `in_proj`), and the
model's config.json (`--input` may be the model folder) must agree with --model: activation, widths, depths, heads,
patch and image size, context length and projection dim, or nothing is imported. Without --model the config.json
names the model: a CLIP preset it fits, or a `SiglipModel` of whatever size it describes (SigLIP's towers,
models/siglip_vit.py; its SentencePiece file beside the weights becomes the model's tokenizer), or a SigLIP 2 NaFlex
`Siglip2Model` (the same towers with config.model.vision.naflex; exported back as one).

Exports load in the target library's own loaders with nothing added by hand: `--format=open_clip` writes
X.safetensors and, for a CLIP model, open_clip's model config X.json beside it; `--format=hf` writes a folder with
the weights, config.json, the tokenizer's files and preprocessor_config.json (our evaluation's resize, crop, mean and
std). An existing --output is replaced only with --overwrite, and only once the new files are complete.

big_vision's two-tower `.npz` files (the released SigLIP and SigLIP 2 checkpoints) import into the SigLIP preset
--model names and export in the same layout (models/interchange/big_vision.py).

Inputs are `.safetensors`, `.npz` or torch files read with `torch.load(weights_only=True)`: nothing is ever
unpickled.
Flags are absl flags; the first argument is the command, import or export. Exit codes as for every command
(cli/common.py): 2 for a bad request, a file that does not fit the model, or a missing input.
"""
from __future__ import annotations

from typing import Any

from absl import flags, logging

from vlp_jax import models, paths
from vlp_jax.cli import common
from vlp_jax.interchange import (EXPORT_FORMATS, IMPORT_FORMATS, WeightsError, export_weights, import_weights,
                                 open_clip_config_path)

# The commands and the flags each one needs, and the switches each one may take (the others must not be given).
COMMANDS = {'import': ('format', 'input', 'output'), 'export': ('format', 'checkpoint', 'output')}
# --model is needed unless a Hugging Face config.json names the model (import_weights says so when it is missing).
SWITCHES = {'import': ('model',), 'export': ('ema', 'overwrite')}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The flags of both commands (which takes which: COMMANDS)."""
  flags.DEFINE_string('format', None, f'import: one of {", ".join(IMPORT_FORMATS)}; export: one of '
                      f'{", ".join(EXPORT_FORMATS)}.', flag_values=flag_values)
  flags.DEFINE_string('model', None, f'import: the open_clip model name, one of {", ".join(sorted(models.PRESETS))}.',
                      flag_values=flag_values)
  flags.DEFINE_string('input', None, 'import: .safetensors, .npz (big_vision), or a torch state dict (read with '
                      'weights_only); for --format=hf also the model folder (its config.json is checked against '
                      '--model).', flag_values=flag_values)
  flags.DEFINE_string('checkpoint', None, 'export: a checkpoint step directory, an imported checkpoint, or a workdir '
                      '(its latest step).', flag_values=flag_values)
  flags.DEFINE_string('output', None, 'import: the checkpoint directory to create; export: the .safetensors file '
                      '(open_clip), the folder (hf) or the .npz file (big_vision) to create.', flag_values=flag_values)
  flags.DEFINE_bool('ema', None, "export: the run's EMA of the weights (trained with config.ema.decay > 0) instead "
                    'of its parameters.', flag_values=flag_values)
  flags.DEFINE_bool('overwrite', None, 'export: replace an existing --output (the new files are written first, then '
                    'renamed into place).', flag_values=flag_values)


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
  return export_weights(values['format'], values['checkpoint'], values['output'], bool(values.get('ema')),
                        bool(values.get('overwrite')))


def command(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """argv: the program name and the command (import or export); the flags as parsed. Prints what was written."""
  if len(argv) != 2:
    given = f'got {argv[1:]}' if argv[1:] else 'none was given'
    raise WeightsError(f'expected one command ({given}); valid choices: {list(COMMANDS)}')
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  names = {flag for table in (COMMANDS, SWITCHES) for flags_of_command in table.values() for flag in flags_of_command}
  values = {flag: flag_values[flag].value for flag in sorted(names)}
  written = run(argv[1], values)
  print(f'Wrote {written}')
  if argv[1] == 'export' and values['format'] == 'open_clip' and paths.exists(open_clip_config_path(written)):
    name = paths.basename(open_clip_config_path(written))[:-len('.json')]
    print(f'Wrote {open_clip_config_path(written)}, its open_clip model config: open_clip.add_model_config('
          f"'{open_clip_config_path(written)}'); open_clip.create_model_and_transforms('{name}', "
          f"pretrained='{written}')")


def main(args: list[str]) -> int:
  """`python -m vlp_jax.weights ARGS` in this process (scripts and tests): the exit code, with the messages on
  stderr as on the command line (cli/common.py `run_in_process`)."""
  return common.run_in_process(command, define_flags, ['vlp_jax.weights', *args], takes_arguments=True)


def run_command() -> None:
  """The command line: `python -m vlp_jax.weights import|export --flag=... ...`."""
  common.run(command, define_flags, takes_arguments=True)


if __name__ == '__main__':
  run_command()
