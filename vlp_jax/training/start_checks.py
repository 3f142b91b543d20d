"""Checks of the data and the tokenizer against what the model and the objective need, run by the trainer before
anything compiles (after the config is validated and the shards are found): problems that no config check can see,
because they are in the files, and that would otherwise kill the run later or silently degrade it.

  - the tokenizer's ids fit the text tower's embedding table (config.model.text.vocab_size): an id past the table is
    clamped by the gather or embeds as NaN, silently;
  - a few records of the training data (the first ones of the first shard of each source) carry their caption in
    config.data.caption_field (else training would skip every record as bad), and what the objective and its terms
    declare they read (`Objective.record_needs`, data/storage/record_needs.py): COSMOS's long captions, the LocCa
    location tasks' regions.

Every problem found is listed in one ConfigError (exit 2), each naming the field or key, what needs it and the fix.
"""
from __future__ import annotations

import ml_collections

from vlp_jax import errors
from vlp_jax.data import formats
from vlp_jax.data.storage import records
from vlp_jax.data.storage.record_needs import RecordNeed, carries, unmet_needs
from vlp_jax.data.text.tokenizer_factory import tokenizer_options, vocabulary_size
from vlp_jax.objectives import OBJECTIVES, TERMS, with_defaults

SAMPLE_RECORDS = 32  # records read in all, spread over the sources' first shards
READ_PER_WANTED = 2  # records read per record wanted: bad records in the sample are skipped, as training skips them


def vocabulary_problem(text: ml_collections.ConfigDict) -> str | None:
  """What is wrong when the tokenizer of config.model.text emits ids past its embedding table; None when they fit."""
  ids, rows = vocabulary_size(text), int(text.vocab_size)
  if ids <= rows:
    return None
  options = tokenizer_options(text)
  named = f"config.model.text.tokenizer='{options['tokenizer']}'" + (
      f", tokenizer_path='{options['tokenizer_path']}'" if options['tokenizer_path'] else '')
  return (f'the tokenizer ({named}) emits {ids} ids, and the text tower has config.model.text.vocab_size={rows} '
          f'rows: ids {rows} to {ids - 1} would be clamped or embed as NaN. Use the tokenizer that came with the '
          f'weights, or a table that holds it: --config.model.text.vocab_size={ids}')


def record_needs(config: ml_collections.ConfigDict) -> list[RecordNeed]:
  """What the objective and its terms (config.objective.terms) read from the records, as they declare it."""
  objective = OBJECTIVES.get(config.objective.name)
  needs = list(objective.record_needs(objective.options(config.objective), config))
  for name in config.objective.terms:
    term = TERMS.get(name)
    needs.extend(term.record_needs(with_defaults(term.default_config(), config.objective.get(name, {})), config))
  return needs


def readable(record) -> dict | None:
  """A record as the pipeline reads it (its image left encoded), or None for one it cannot read."""
  try:
    example = record if isinstance(record, dict) else records.deserialize(record)
  except records.BadRecordError:
    return None
  return None if 'bad' in example else example


def caption_problem(examples: list[dict], caption_field: str, where: str) -> str | None:
  """What is wrong when none of the records read carries text in config.data.caption_field (training would skip
  every one of them as bad); None otherwise or with no records."""
  if not examples or any(carries(e, caption_field) for e in examples):
    return None
  texts = sorted({k for e in examples for k, v in e.items() if isinstance(v, str) and k not in ('key', 'source')
                  and carries(e, k)})
  return (f"config.data.caption_field='{caption_field}' is empty in all {len(examples)} records read ({where}); "
          f'their text fields are {texts}: set --config.data.caption_field to the one that holds the captions')


def first_shards(data: ml_collections.ConfigDict, paths: list[str]) -> list[int]:
  """The index in `paths` of the first shard of each source (every source is checked, not only the first)."""
  try:
    sources = formats.data_format(data).shard_sources(paths)
  except ValueError:  # inconsistent sources: the data pipeline reports them with their fix
    return [0]
  first = {}
  for index, source in enumerate(sources):
    first.setdefault(source, index)
  return sorted(first.values())


def sample_records(data: ml_collections.ConfigDict, paths: list[str], count: int = SAMPLE_RECORDS
                   ) -> tuple[list[dict], list[str]]:
  """(up to `count` readable records, images still encoded, from the start of the first shard of each source; the
  shards read). A shard that cannot be read gives none: training reports it, with its own exit code."""
  fmt = formats.data_format(data)
  chosen = [paths[i] for i in first_shards(data, paths)]
  wanted = max(1, -(-count // len(chosen)))
  examples, read = [], []
  for path in chosen:
    try:
      shard = fmt.records_reader([path], [''], [path])([path], [0])  # the source name is not needed here
      items = shard.__getitems__(list(range(min(len(shard), wanted * READ_PER_WANTED))))
    except Exception:  # pylint: disable=broad-except
      continue  # any reader's failure on a broken shard: the pipeline reports it, with its own exit code
    found = [e for e in (readable(record) for _, record in items) if e is not None][:wanted]
    if found:
      examples.extend(found)
      read.append(path)
  return examples, read


def start_problems(config: ml_collections.ConfigDict, paths: list[str]) -> list[str]:
  """Every problem of the tokenizer and the records against the model and the objective, one line each."""
  problems = [vocabulary_problem(config.model.text)]
  examples, read = sample_records(config.data, paths) if paths else ([], [])
  where = (f'the first of {read[0]}' if len(read) == 1 else
           f'the first of {len(read)} shards, one per source: {read[0]}, ...') if read else ''
  problems.append(caption_problem(examples, config.data.caption_field, where))
  # judged on the records training would use: those with a caption
  used = [e for e in examples if carries(e, config.data.caption_field)]
  problems.extend(unmet_needs(record_needs(config), used, where))
  return [p for p in problems if p]


def check_start(config: ml_collections.ConfigDict, paths: list[str]) -> None:
  """Raise ConfigError listing every problem `start_problems` finds; `paths`: the training shards."""
  problems = start_problems(config, paths)
  if len(problems) == 1:
    raise errors.ConfigError(problems[0])
  if problems:
    raise errors.ConfigError(f'the data and the tokenizer do not fit this run ({len(problems)} problems):\n'
                             + '\n'.join(f'{i}. {text}' for i, text in enumerate(problems, 1)))
