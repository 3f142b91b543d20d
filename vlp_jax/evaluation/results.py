"""Eval results as people read them: each score beside its chance level, as printed text or a markdown table.

Results are flat {'eval/<dataset>/<metric>': value} dicts, the names of metrics.jsonl.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

# The chance level a score is read against, when the evaluator reports one: `<metric>_chance` beside it
# (segmentation's), or the one named here.
CHANCE_OF = {'zeroshot_top1': 'zeroshot_chance', 'zeroshot_mean_per_class': 'zeroshot_chance',
             'linear_probe_top1': 'linear_probe_chance', 'linear_probe_mean_per_class': 'linear_probe_chance',
             'compositional_acc': 'compositional_chance', 'i2t_r1': 'i2t_r1_chance', 't2i_r1': 't2i_r1_chance',
             'winoground_text': 'winoground_text_chance', 'winoground_image': 'winoground_image_chance',
             'winoground_group': 'winoground_group_chance',
             # referring.py's chance route (the mean train box) is the chance of both others
             'referring_probe_acc50': 'referring_chance_acc50', 'referring_decoder_acc50': 'referring_chance_acc50',
             'referring_probe_miou': 'referring_chance_miou', 'referring_decoder_miou': 'referring_chance_miou'}
CHANCE_NAMES = frozenset(CHANCE_OF.values())


def split_name(name: str) -> tuple[str, str]:
  """'eval/<dataset>/<metric>' -> (dataset, metric)."""
  _, dataset, metric = name.split('/', 2)
  return dataset, metric


def chance_level(results: dict[str, float], name: str) -> float | None:
  """The chance level of the metric `name` in `results`, None when it has none. A variant's scores (a teacher's
  'teacher_zeroshot_top1', the EMA's 'ema_zeroshot_top1') share the trained model's chance level."""
  dataset, metric = split_name(name)
  if f'eval/{dataset}/{metric}_chance' in results:
    return results[f'eval/{dataset}/{metric}_chance']
  prefix, base = '', metric
  for key in CHANCE_OF:
    if metric.endswith(key):
      prefix, base = metric[:-len(key)], key
      break
  if base not in CHANCE_OF:
    return None
  for candidate in (f'eval/{dataset}/{prefix}{CHANCE_OF[base]}', f'eval/{dataset}/{CHANCE_OF[base]}'):
    if candidate in results:
      return results[candidate]
  return None


def is_chance(name: str) -> bool:
  """Whether the metric 'eval/<dataset>/<metric>' is a chance level (`<metric>_chance` or one of CHANCE_OF's)."""
  return name.endswith('_chance') or any(name.endswith(f'/{c}') or name.endswith(f'_{c}') for c in CHANCE_NAMES)


def scores(results: dict[str, float]) -> list[str]:
  """The eval metric names to show, sorted: every eval/* entry except the chance levels themselves."""
  return sorted(n for n in results if n.startswith('eval/') and not is_chance(n))


def summary_lines(results: dict[str, float]) -> list[str]:
  """One aligned line per score, with its chance level where it has one."""
  lines = []
  width = max([40, *map(len, scores(results))])
  for name in scores(results):
    chance = chance_level(results, name)
    lines.append(f'  {name:{width}s} {results[name]:.4f}' + (f'   (chance {chance:.4f})' if chance is not None else ''))
  return lines


def markdown_table(results: dict[str, float]) -> str:
  """A markdown table with one row per (dataset, metric): value and chance level."""
  rows = ['| dataset | metric | value | chance |', '|---|---|---:|---:|']
  for name in scores(results):
    dataset, metric = split_name(name)
    chance = chance_level(results, name)
    rows.append(f'| {dataset} | {metric} | {results[name]:.4f} | ' + (f'{chance:.4f} |' if chance is not None
                                                                       else '|'))
  return '\n'.join(rows) + '\n'


def results_key(datasets: Sequence[str], split: str, changed_settings: dict[str, Any]) -> str:
  """The name of one evaluation's results folder, so that evaluating a checkpoint on other eval sets or settings
  keeps the earlier results: 'synthetic+digits-test' for those sets and split, followed by '-' and 6 hex digits of a
  hash of `changed_settings` ({dotted key: value} that differ from the checkpoint's saved config, such as
  {'eval.tasks': ['zeroshot']}) when there are any. The same request always gets the same name."""
  key = f"{'+'.join(datasets)}-{split}"
  if changed_settings:
    digest = hashlib.sha1(json.dumps(changed_settings, sort_keys=True, default=str).encode()).hexdigest()
    key += f'-{digest[:6]}'
  return key
