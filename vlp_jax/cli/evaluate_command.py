"""Evaluate any checkpoint (trained, or imported with vlp_jax.weights) on any eval sets:

  python -m vlp_jax.evaluate --checkpoint=CKPT [--evals=zeroshot,retrieval,...] [--datasets=synthetic,digits]
      [--split=test] [--batch_size=N] [--output_dir=DIR] [--plots] [--config.data.tfds_dir=/data/tfds ...]

CKPT is a workdir (its latest checkpoint), a checkpoint step directory, or an imported checkpoint. Everything not
given comes from the config saved with the checkpoint, so that the numbers equal the in-training evaluation of that
step. `--config.KEY=VALUE` overrides a value of that saved config with train's syntax and parser (ml_collections
config flags: `--config.eval.datasets=synthetic --config.eval.datasets=digits` or
`--config.eval.datasets="('synthetic','digits')"` for a tuple); --evals, --datasets, --split and --batch_size set
config.eval.tasks, .datasets, .split and .batch_size. `config.validate` then checks the result, naming any bad key
and its valid choices, before anything is loaded or compiled. Writes DIR/eval_results.json ({'metrics':
{'eval/<dataset>/<metric>': value}, and what was evaluated}) and DIR/eval_results.md (a markdown table), and with
--plots the PNG figures of evaluation/plots.py. DIR defaults to WORKDIR/eval/<step>/<KEY> for a training checkpoint
and to CKPT-eval/<KEY> beside any other checkpoint, KEY naming the eval sets and split, e.g. `synthetic+digits-test`,
with a short hash of any other setting changed from the saved config (`evaluation.results.results_key`): another
evaluation of the same checkpoint keeps the earlier ones, and --overwrite replaces only the results of the same KEY.
Exit codes as for every command (cli/common.py): 2 for a bad request.
"""
from __future__ import annotations

import json
import time
from typing import Any, Sequence

import jax
import ml_collections
from absl import flags, logging
from ml_collections import config_flags

from vlp_jax import config as config_lib
from vlp_jax import errors, evalsets, models, objectives, parallel, paths
from vlp_jax.checkpoint_files import has_ema, load_variables, resolve_checkpoint
from vlp_jax.cli import common
from vlp_jax.evaluation import Encoder, evaluate_variants, report_evaluated
from vlp_jax.evaluation import plots as eval_plots
from vlp_jax.evaluation.results import markdown_table, results_key, summary_lines
from vlp_jax.models.transformer import BlockStack, in_layout
from vlp_jax.training import ema as ema_lib
from vlp_jax.training.checkpoint import load_config
from vlp_jax.training.curves import plot_curves
from vlp_jax.training.writer import flat_config

RESULTS_JSON = 'eval_results.json'
RESULTS_MARKDOWN = 'eval_results.md'


class EvaluateError(errors.ConfigError):
  """A bad request (existing results); the message says what to change. Exit code 2, as every ConfigError."""


def checkpoint_step(checkpoint_dir: str) -> int | None:
  """The training step of a `<workdir>/checkpoints/<step>` directory; None for an imported checkpoint."""
  name = paths.basename(checkpoint_dir)
  parent = paths.basename(paths.parent(checkpoint_dir))
  return int(name) if name.isdigit() and parent == 'checkpoints' else None


def default_output_dir(checkpoint_dir: str, key: str) -> str:
  """WORKDIR/eval/<step>/<key> for a training checkpoint, CKPT-eval/<key> beside any other (never inside a
  checkpoint, which orbax may delete); key: `results_key` of the evaluation. Local or on an object store."""
  checkpoint_dir = paths.join(paths.parent(checkpoint_dir), paths.basename(checkpoint_dir))  # no trailing '/'
  step = checkpoint_step(checkpoint_dir)
  if step is not None:
    return paths.join(paths.parent(paths.parent(checkpoint_dir)), 'eval', str(step), key)
  return paths.join(checkpoint_dir + '-eval', key)


def changed_settings(saved: ml_collections.ConfigDict, requested: ml_collections.ConfigDict) -> dict[str, Any]:
  """{dotted key: requested value} of every value the request changes in the checkpoint's saved config, except the
  eval sets and split (which `results_key` names in full)."""
  before, after = flat_config(saved), flat_config(requested)
  return {key: value for key, value in sorted(after.items())
          if key not in ('eval.datasets', 'eval.split') and before.get(key, object()) != value}


def define_config_overrides(flag_values: flags.FlagValues = flags.FLAGS, argv: Sequence[str] | None = None
                            ) -> flags.FlagHolder:
  """The `--config.KEY=VALUE` flags, parsed as train's `--config` overrides are (ml_collections config flags, as
  `config.define_config_flag`): the type of KEY in `config.base_config()`, or a Python literal (else a string) for
  a key it does not have, such as an objective option; `config.validate` rejects unknown keys. argv: the command
  line the flags will parse (default sys.argv), from which config_flags defines one flag per KEY.
  `config_flags.get_override_values(flag_values['config'])` gives the parsed {KEY: value}."""
  holder = config_flags.DEFINE_config_dict(
      'config', config_lib.base_config(), "--config.KEY=VALUE overrides a value of the checkpoint's saved config, "
      'with the syntax of training, e.g. --config.data.tfds_dir=/data/tfds (repeatable).', flag_values=flag_values,
      lock_config=False, accept_new_attributes=True, sys_argv=None if argv is None else list(argv))
  flag_values['config'].default_as_str = "the checkpoint's saved config"  # not all of base_config() in --help
  return holder


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict[str, Any]) -> None:
  """Set {'data.tfds_dir': '/x', ...} in `config`, new keys included (`config.validate` names the unknown ones)."""
  for key, value in overrides.items():
    *parents, leaf = key.split('.')
    node = config
    for depth, part in enumerate(parents):
      if part not in node:
        node[part] = ml_collections.ConfigDict()
      node = node[part]
      if not isinstance(node, ml_collections.ConfigDict):
        raise EvaluateError(f"--config.{key}: config.{'.'.join(parents[:depth + 1])} is a value, not a group of keys")
    node[leaf] = value


def eval_config(config: ml_collections.ConfigDict, evals: Sequence[str] | None = None,
                dataset_names: Sequence[str] | None = None, split: str | None = None, batch_size: int | None = None,
                overrides: dict[str, Any] | None = None) -> ml_collections.ConfigDict:
  """The checkpoint's config with the requested values (evals -> config.eval.tasks, dataset_names ->
  config.eval.datasets, split, batch_size -> config.eval.split / .batch_size; then `overrides`, {KEY: value} as from
  `--config.KEY=VALUE`), checked by `config.validate` before anything is loaded or compiled: a ConfigError names
  the first invalid key and its valid choices."""
  config = ml_collections.ConfigDict(config.to_dict())
  if evals:
    config.eval.tasks = tuple(evals)
  if dataset_names:
    config.eval.datasets = tuple(dataset_names)
  if split is not None:
    config.eval.split = split
  if batch_size is not None:
    config.eval.batch_size = batch_size
  apply_overrides(config, overrides or {})
  config_lib.validate(config)
  return config


def evaluate(checkpoint: str, config: ml_collections.ConfigDict | None = None, plots_dir: str | None = None
             ) -> tuple[dict[str, float], dict[str, Any]]:
  """Run `config.eval.tasks` on `config.eval.datasets` (default: the checkpoint's config) for every eval variant of
  the checkpoint's objective (the trained model, and a teacher where there is one) and its EMA of the weights where
  it has one (config.ema.decay), exactly as the training loop does. Returns ({'eval/<dataset>/<metric>': value}, a
  description of what was evaluated)."""
  checkpoint = resolve_checkpoint(checkpoint)
  config = config or eval_config(load_config(checkpoint))
  params, model_state = load_variables(checkpoint)
  ema = load_variables(checkpoint, ema=True)[0] if has_ema(checkpoint) else None
  stack = BlockStack.from_config(config.model)  # the overrides may change scan_layers
  params, ema = in_layout(params, stack), None if ema is None else in_layout(ema, stack)
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  mesh = parallel.make_mesh()
  began = time.perf_counter()
  eval_sets = evalsets.load_eval_sets(config)
  for eval_set in eval_sets:
    print(f'{eval_set.name} ({config.eval.split}): {len(eval_set.images)} images, {len(eval_set.captions)} captions',
          flush=True)
  print(f'Loaded the eval sets in {time.perf_counter() - began:.1f}s', flush=True)
  report_evaluated(eval_sets, tuple(config.eval.tasks))
  # Each variant's variables are given to the encoder in turn (`evaluate_variants`).
  encoder = Encoder(model, {}, mesh, config.eval.batch_size, config.model.text.context_length)

  def after_variant(prefix: str, seconds: float) -> None:
    print(f'Evaluated {"the " + prefix.rstrip("_") if prefix else "the model"} in {seconds:.1f}s', flush=True)
    if plots_dir and not prefix:
      write_plots(plots_dir, checkpoint, encoder, eval_sets, objective, params, model_state)

  # Placed on the devices one variant at a time.
  variants = ((prefix, parallel.replicated_from_host(variables, mesh))
              for prefix, variables in ema_lib.eval_variants(objective, params, model_state, ema).items())
  results = evaluate_variants(encoder, variants, eval_sets, tuple(config.eval.tasks), config.eval.templates,
                              after_variant, tuple(config.eval.naflex_max_patches), objective.preprocessing)
  info = {'checkpoint': checkpoint, 'step': checkpoint_step(checkpoint), 'split': config.eval.split,
          'datasets': list(config.eval.datasets), 'evals': list(config.eval.tasks), 'model': config.model.name,
          'objective': ' + '.join((config.objective.name, *config.objective.terms))}
  return results, info


def write_plots(out_dir: str, checkpoint: str, encoder, eval_sets: list, objective, params: dict,
                model_state: dict) -> list[str]:
  """The evaluation figures of every eval set, COSMOS cross-attention maps where the objective has them, and the
  training curves of the checkpoint's workdir. Every process embeds (the encoder runs over the whole mesh); process
  0 draws and writes."""
  written = []
  for eval_set in eval_sets:
    image_emb = encoder.images(eval_set.images)
    text_emb = encoder.texts(eval_set.captions) if len(eval_set.captions) else None
    if jax.process_index() != 0:
      continue
    paths.makedirs(out_dir)
    written += eval_plots.write_eval_plots(encoder, eval_set, out_dir, image_emb, text_emb)
    cross_attention = eval_plots.write_cross_attention_plot(objective, params, model_state, eval_set, out_dir)
    written += [cross_attention] if cross_attention else []
  if jax.process_index() != 0:
    return written
  if checkpoint_step(checkpoint) is not None:
    workdir = paths.parent(paths.parent(checkpoint))
    curves = plot_curves(workdir)
    written += [curves] if curves else []
  for path in written:
    print(f'Wrote {path}', flush=True)
  return written


def check_output_dir(out_dir: str, overwrite: bool) -> None:
  """Refuses to replace earlier results unless asked to (before the evaluation runs, not after)."""
  existing = [n for n in (RESULTS_JSON, RESULTS_MARKDOWN) if paths.exists(paths.join(out_dir, n))]
  if existing and not overwrite:
    raise EvaluateError(f'{out_dir} already has {", ".join(existing)} of this evaluation (the same eval sets, split '
                        'and settings); pass --overwrite to replace them (other evaluations are kept), or choose '
                        'another --output_dir')


def write_results(out_dir: str, results: dict[str, float], info: dict[str, Any]) -> tuple[str, str]:
  """eval_results.json and eval_results.md in `out_dir`, each written whole or not at all."""
  paths.makedirs(out_dir)
  json_path, markdown_path = paths.join(out_dir, RESULTS_JSON), paths.join(out_dir, RESULTS_MARKDOWN)
  metrics = {k: float(v) for k, v in sorted(results.items())}
  paths.write_text(json_path, json.dumps({**info, 'metrics': metrics}, indent=2) + '\n')
  step = f' at step {info["step"]}' if info.get('step') is not None else ''
  header = (f'# Evaluation of {info["checkpoint"]}{step}\n\nModel {info["model"]}, objective {info["objective"]}; '
            f'{info["split"]} split.\n\n')
  paths.write_text(markdown_path, header + markdown_table(metrics))
  return json_path, markdown_path


def run(checkpoint: str, evals: Sequence[str] | None = None, dataset_names: Sequence[str] | None = None,
        split: str | None = None, output_dir: str | None = None, plots: bool = False, batch_size: int | None = None,
        overrides: dict[str, Any] | None = None, overwrite: bool = False) -> dict[str, float]:
  """The command: check the request (`eval_config`), evaluate, write the results (process 0) and print them."""
  checkpoint = resolve_checkpoint(checkpoint)
  saved = load_config(checkpoint)
  config = eval_config(saved, evals, dataset_names, split, batch_size, overrides)
  changed = changed_settings(saved, config)
  out_dir = output_dir or default_output_dir(checkpoint, results_key(config.eval.datasets, config.eval.split,
                                                                     changed))
  check_output_dir(out_dir, overwrite)
  results, info = evaluate(checkpoint, config, out_dir if plots else None)
  info['changed_settings'] = changed  # what a hash in the folder's name stands for
  if jax.process_index() == 0:
    paths = write_results(out_dir, results, info)
    print('\n'.join([f'Results on the {config.eval.split} split:', *summary_lines(results)]))
    print(f'Wrote {paths[0]} and {paths[1]}', flush=True)
  return results


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags, with the `--config.KEY=VALUE` overrides (`define_config_overrides`)."""
  flags.DEFINE_string('checkpoint', None, 'Workdir (its latest step), checkpoint step dir, or imported checkpoint.',
                      flag_values=flag_values)
  flags.DEFINE_list('evals', [], "Sets config.eval.tasks: the evaluators to run (default: the checkpoint config's).",
                    flag_values=flag_values)
  flags.DEFINE_list('datasets', [], "Sets config.eval.datasets: the eval sets (default: the checkpoint config's).",
                    flag_values=flag_values)
  flags.DEFINE_string('split', None, "Sets config.eval.split, 'val' or 'test' (default: the checkpoint config's).",
                      flag_values=flag_values)
  flags.DEFINE_integer('batch_size', None, "Sets config.eval.batch_size: examples per forward pass (default: the "
                       "checkpoint config's).", flag_values=flag_values)
  flags.DEFINE_string('output_dir', None, 'Where to write the results (default: WORKDIR/eval/<step>/<KEY> for a '
                      'training checkpoint, CKPT-eval/<KEY> beside any other; KEY names the eval sets and split, '
                      'e.g. synthetic+digits-test, with a short hash of any other changed setting).',
                      flag_values=flag_values)
  flags.DEFINE_bool('plots', False, 'Also write PNG plots (t-SNE, affinity histogram, retrieval examples, '
                    'cross-attention maps, training curves).', flag_values=flag_values)
  flags.DEFINE_bool('overwrite', False, 'Replace the existing results of the same evaluation (the same output '
                    'directory); results of other eval sets or settings are kept.', flag_values=flag_values)
  common.define_verbose_flag(flag_values)
  define_config_overrides(flag_values)
  flags.mark_flag_as_required('checkpoint', flag_values=flag_values)


def command(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Evaluate with the parsed flags; raises the user-facing errors of vlp_jax/errors.py."""
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  parallel.initialize_distributed()
  f = flag_values
  common.show_details(f.verbose)
  run(f.checkpoint, f.evals, f.datasets, f.split, f.output_dir, f.plots, f.batch_size,
      config_flags.get_override_values(f['config']), f.overwrite)


def run_command() -> None:
  """The command line: `python -m vlp_jax.evaluate`."""
  common.run(command, define_flags)


if __name__ == '__main__':
  run_command()
