"""Evaluate any checkpoint (trained, or imported with vlp_jax.weights) on any eval sets:

  python -m vlp_jax.evaluate --checkpoint=CKPT [--evals=zeroshot,retrieval,...] [--datasets=synthetic,digits]
      [--split=test] [--output_dir=DIR] [--plots] [--set=data.tfds_dir=/data/tfds ...]

CKPT is a workdir (its latest checkpoint), a checkpoint step directory, or an imported checkpoint. Everything not
given (or changed with --set KEY=VALUE) comes from the config saved with the checkpoint, so that the numbers equal
the in-training evaluation of that step. Writes DIR/eval_results.json ({'metrics': {'eval/<dataset>/<metric>':
value}, and what was evaluated}) and DIR/eval_results.md (a markdown table), and with --plots the PNG figures of
evaluation/plots.py. DIR defaults to WORKDIR/eval/<step> for a training checkpoint and to CKPT-eval beside any
other checkpoint.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import ml_collections
from absl import app, flags, logging

RESULTS_JSON = 'eval_results.json'
RESULTS_MARKDOWN = 'eval_results.md'


class EvaluateError(ValueError):
  """A bad request (unknown evaluator or dataset, existing results); the message says what to change."""


def checkpoint_step(checkpoint_dir: str) -> int | None:
  """The training step of a `<workdir>/checkpoints/<step>` directory; None for an imported checkpoint."""
  name = os.path.basename(os.path.normpath(checkpoint_dir))
  parent = os.path.basename(os.path.dirname(os.path.normpath(checkpoint_dir)))
  return int(name) if name.isdigit() and parent == 'checkpoints' else None


def default_output_dir(checkpoint_dir: str) -> str:
  """WORKDIR/eval/<step> for a training checkpoint, CKPT-eval beside any other (never inside a checkpoint, which
  orbax may delete)."""
  checkpoint_dir = os.path.normpath(checkpoint_dir)
  step = checkpoint_step(checkpoint_dir)
  if step is not None:
    return os.path.join(os.path.dirname(os.path.dirname(checkpoint_dir)), 'eval', str(step))
  return checkpoint_dir + '-eval'


def parse_override(config: ml_collections.ConfigDict, assignment: str) -> tuple[str, Any]:
  """'data.tfds_dir=/x' -> ('data.tfds_dir', '/x'), the value converted to the type the key has in `config`
  (tuples from comma-separated lists)."""
  key, sep, text = assignment.partition('=')
  key = key.strip().removeprefix('config.')
  node = config
  parts = key.split('.')
  for part in parts[:-1]:
    node = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
  if not sep or not isinstance(node, ml_collections.ConfigDict) or parts[-1] not in node:
    raise EvaluateError(f"--set {assignment!r}: expected KEY=VALUE with KEY an existing config key such as "
                        "data.tfds_dir (see vlp_jax/config.py)")
  current = node[parts[-1]]
  try:
    if isinstance(current, bool):
      if text.lower() not in ('true', 'false', '1', '0'):
        raise ValueError(text)
      return key, text.lower() in ('true', '1')
    if isinstance(current, (tuple, list)):
      return key, tuple(item.strip() for item in text.split(',') if item.strip())
    return key, type(current)(text) if current is not None else text
  except ValueError:
    raise EvaluateError(f'--set {assignment!r}: config.{key} takes {type(current).__name__} values, '
                        f'got {text!r}') from None


def eval_config(config: ml_collections.ConfigDict, evals: list[str] | None = None,
                dataset_names: list[str] | None = None, split: str | None = None, batch_size: int | None = None,
                overrides: list[str] | None = None) -> ml_collections.ConfigDict:
  """The checkpoint's config with the requested overrides, checked before anything is loaded or compiled."""
  from vlp_jax import config as config_lib
  from vlp_jax import evalsets
  from vlp_jax.evaluation import EVALUATORS
  config = ml_collections.ConfigDict(config.to_dict())
  for task in evals or ():
    if task not in EVALUATORS:
      raise EvaluateError(f"--evals has '{task}'; valid choices: {sorted(EVALUATORS)}")
  for name in dataset_names or ():
    if name not in evalsets.EVAL_SETS:
      raise EvaluateError(f"--datasets has '{name}'; valid choices: {list(evalsets.EVAL_SETS)}")
  if split is not None and split not in ('val', 'test'):
    raise EvaluateError(f"--split={split!r} is not valid; valid choices: ['val', 'test']")
  if batch_size is not None and batch_size < 1:
    raise EvaluateError(f'--batch_size must be positive, got {batch_size}')
  config.eval.tasks = tuple(evals) if evals else tuple(config.eval.tasks)
  config.eval.datasets = tuple(dataset_names) if dataset_names else tuple(config.eval.datasets)
  config.eval.split = split or config.eval.split
  config.eval.batch_size = batch_size or config.eval.batch_size
  for assignment in overrides or ():
    key, value = parse_override(config, assignment)
    parent, _, leaf = key.rpartition('.')
    (config[parent] if parent else config)[leaf] = value
  try:
    config_lib.validate(config)
  except config_lib.ConfigError as error:
    raise EvaluateError(f'the checkpoint config, with the overrides, is not valid: {error}') from None
  return config


def evaluate(checkpoint: str, config: ml_collections.ConfigDict | None = None, plots_dir: str | None = None
             ) -> tuple[dict[str, float], dict[str, Any]]:
  """Run `config.eval.tasks` on `config.eval.datasets` (default: the checkpoint's config) for every eval variant of
  the checkpoint's objective (the trained model, and a teacher where there is one), exactly as the training loop
  does. Returns ({'eval/<dataset>/<metric>': value}, a description of what was evaluated)."""
  from vlp_jax import evalsets, models, objectives, parallel
  from vlp_jax.evaluation import Encoder, run_evaluations
  from vlp_jax.training.checkpoint import load_config
  from vlp_jax.checkpoint_files import load_variables, resolve_checkpoint
  checkpoint = resolve_checkpoint(checkpoint)
  config = config or eval_config(load_config(checkpoint))
  params, model_state = load_variables(checkpoint)
  model = models.build_model(config.model)
  objective = objectives.build(config, model)
  mesh = parallel.make_mesh()
  began = time.perf_counter()
  eval_sets = evalsets.load_eval_sets(config)
  for eval_set in eval_sets:
    print(f'{eval_set.name} ({config.eval.split}): {len(eval_set.images)} images, {len(eval_set.captions)} captions',
          flush=True)
  print(f'Loaded the eval sets in {time.perf_counter() - began:.1f}s', flush=True)
  encoder = None
  results = {}
  for prefix, variables in objective.eval_variants(params, model_state).items():
    variables = parallel.replicated_from_host(variables, mesh)
    if encoder is None:
      encoder = Encoder(model, variables, mesh, config.eval.batch_size, config.model.text.context_length)
    encoder.variables = variables
    began = time.perf_counter()
    results.update(run_evaluations(encoder, eval_sets, tuple(config.eval.tasks), prefix,
                                           config.eval.templates))
    print(f'Evaluated {"the " + prefix.rstrip("_") if prefix else "the model"} in '
          f'{time.perf_counter() - began:.1f}s', flush=True)
    if plots_dir and not prefix:
      write_plots(plots_dir, checkpoint, encoder, eval_sets, objective, params, model_state)
  info = {'checkpoint': checkpoint, 'step': checkpoint_step(checkpoint), 'split': config.eval.split,
          'datasets': list(config.eval.datasets), 'evals': list(config.eval.tasks), 'model': config.model.name,
          'objective': ' + '.join((config.objective.name, *config.objective.terms))}
  return results, info


def write_plots(out_dir: str, checkpoint: str, encoder, eval_sets: list, objective, params: dict,
                model_state: dict) -> list[str]:
  """The evaluation figures of every eval set, COSMOS cross-attention maps where the objective has them, and the
  training curves of the checkpoint's workdir. Every process embeds (the encoder runs over the whole mesh); process
  0 draws and writes."""
  import jax

  from vlp_jax.evaluation import plots
  from vlp_jax.training.curves import plot_curves
  paths = []
  for eval_set in eval_sets:
    image_emb = encoder.images(eval_set.images)
    text_emb = encoder.texts(eval_set.captions) if len(eval_set.captions) else None
    if jax.process_index() != 0:
      continue
    os.makedirs(out_dir, exist_ok=True)
    paths += plots.write_eval_plots(encoder, eval_set, out_dir, image_emb, text_emb)
    cross_attention = plots.write_cross_attention_plot(objective, params, model_state, eval_set, out_dir)
    paths += [cross_attention] if cross_attention else []
  if jax.process_index() != 0:
    return paths
  if checkpoint_step(checkpoint) is not None:
    workdir = os.path.dirname(os.path.dirname(os.path.normpath(checkpoint)))
    curves = plot_curves(workdir)
    paths += [curves] if curves else []
  for path in paths:
    print(f'Wrote {path}', flush=True)
  return paths


def check_output_dir(out_dir: str, overwrite: bool) -> None:
  """Refuses to replace earlier results unless asked to (before the evaluation runs, not after)."""
  existing = [n for n in (RESULTS_JSON, RESULTS_MARKDOWN) if os.path.exists(os.path.join(out_dir, n))]
  if existing and not overwrite:
    raise EvaluateError(f'{out_dir} already has {", ".join(existing)}; pass --overwrite to replace them, or choose '
                        'another --output_dir')


def _write_atomically(path: str, text: str) -> None:
  tmp = f'{path}.tmp'
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, path)


def write_results(out_dir: str, results: dict[str, float], info: dict[str, Any]) -> tuple[str, str]:
  """eval_results.json and eval_results.md in `out_dir`, each written whole or not at all."""
  from vlp_jax.evaluation.results import markdown_table
  os.makedirs(out_dir, exist_ok=True)
  json_path, markdown_path = os.path.join(out_dir, RESULTS_JSON), os.path.join(out_dir, RESULTS_MARKDOWN)
  metrics = {k: float(v) for k, v in sorted(results.items())}
  _write_atomically(json_path, json.dumps({**info, 'metrics': metrics}, indent=2) + '\n')
  step = f' at step {info["step"]}' if info.get('step') is not None else ''
  header = (f'# Evaluation of {info["checkpoint"]}{step}\n\nModel {info["model"]}, objective {info["objective"]}; '
            f'{info["split"]} split.\n\n')
  _write_atomically(markdown_path, header + markdown_table(metrics))
  return json_path, markdown_path


def run(checkpoint: str, evals: list[str] | None = None, dataset_names: list[str] | None = None,
        split: str | None = None, output_dir: str | None = None, plots: bool = False, batch_size: int | None = None,
        overrides: list[str] | None = None, overwrite: bool = False
        ) -> dict[str, float]:
  """The command: check the request, evaluate, write the results (process 0) and print them."""
  import jax

  from vlp_jax.evaluation.results import summary_lines
  from vlp_jax.training.checkpoint import load_config
  from vlp_jax.checkpoint_files import resolve_checkpoint
  checkpoint = resolve_checkpoint(checkpoint)
  config = eval_config(load_config(checkpoint), evals, dataset_names, split, batch_size, overrides)
  out_dir = output_dir or default_output_dir(checkpoint)
  check_output_dir(out_dir, overwrite)
  results, info = evaluate(checkpoint, config, out_dir if plots else None)
  if jax.process_index() == 0:
    paths = write_results(out_dir, results, info)
    print('\n'.join([f'Results on the {config.eval.split} split:', *summary_lines(results)]))
    print(f'Wrote {paths[0]} and {paths[1]}', flush=True)
  return results


def define_flags() -> None:
  """The command's flags, defined only when it runs as a command: other tools (embed) define --checkpoint too."""
  flags.DEFINE_string('checkpoint', None, 'Workdir, checkpoint step dir, or imported checkpoint.')
  flags.DEFINE_list('evals', [], 'Evaluators to run (default: the config\'s eval.tasks).')
  flags.DEFINE_list('datasets', [], 'Eval sets (default: the config\'s eval.datasets).')
  flags.DEFINE_string('split', None, "'val' or 'test' (default: the config's eval.split).")
  flags.DEFINE_string('output_dir', None, 'Where to write the results (see above for the default).')
  flags.DEFINE_bool('plots', False, 'Also write PNG plots (t-SNE, affinity histogram, retrieval examples, '
                    'cross-attention maps, training curves).')
  flags.DEFINE_integer('batch_size', None, 'Examples per forward pass (default: the config\'s).')
  flags.DEFINE_multi_string('set', [], 'KEY=VALUE: override a value of the checkpoint\'s config, e.g. '
                            'data.tfds_dir=/data/tfds, data.eval_max_examples=1000 or '
                            'data.sugarcrepe_dir=/data/sugarcrepe (repeat the flag for several).')
  flags.DEFINE_bool('overwrite', False, 'Replace existing results in --output_dir.')


def main(argv):
  del argv
  from vlp_jax import parallel
  from vlp_jax.errors import DataNotFoundError
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  parallel.initialize_distributed()
  try:
    f = flags.FLAGS
    run(f.checkpoint, f.evals, f.datasets, f.split, f.output_dir, f.plots, f.batch_size, f.set, f.overwrite)
  except (EvaluateError, DataNotFoundError, FileNotFoundError) as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)


def run_command() -> None:
  """The command line: `python -m vlp_jax.evaluate`."""
  define_flags()
  flags.mark_flags_as_required(['checkpoint'])
  app.run(main)


if __name__ == '__main__':
  run_command()
