"""The conversion: an input format's entries (INPUT_FORMATS) -> records, made by worker processes in chunks
(`convert_chunk`) -> shards written in input order (data/storage/shard_writer.py) -> the manifest (manifest.py).

`convert` is the library call behind `python -m vlp_jax.convert` (cli/convert_command.py, whose --help describes the output);
its keyword arguments are the command's flags.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import math
import multiprocessing
import os
import sys
import time
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from vlp_jax.data.storage import records
from vlp_jax.data.ingest.input_format import (INPUT_FORMATS, ConvertError, Entry, InputFormat, Options, Reading,
                                              has_wildcard, text_ok)
from vlp_jax.data.ingest.images import prepare_image
from vlp_jax.data.ingest.long_captions import load_long_captions, with_long_captions
from vlp_jax.data.ingest.manifest import MANIFEST, finish, fingerprint_of, prepare_output
from vlp_jax.data.ingest.webdataset import DEFAULT_CAPTION_KEY, DEFAULT_IMAGE_KEYS, split_image_keys
from vlp_jax.data.storage.shard_writer import ShardWriter
from vlp_jax.data.sources.webdataset_tars import TarMember, read_member

# Why an input example was skipped before it became a record (records.SKIP_REASONS are why a record is replaced
# in training): the names in the printed summary.
INPUT_SKIP_REASONS = {
    'missing_image_key': 'names no image (webdataset: no member with an --image_keys extension; TSV/CSV/JSONL: '
                         'an empty image field)',
    'missing_caption_key': 'a webdataset sample with no --caption_key member',
    'missing_file': 'the image file does not exist or cannot be read',
    'empty_image': 'the image file has 0 bytes',
    'corrupt_image': 'PIL cannot decode the image, or it is truncated',
    'too_large': 'more pixels than --max_pixels (read from the header, before decoding)',
    'empty_caption': 'the caption is missing or only whitespace',
    'caption_not_utf8': 'the caption bytes are not valid UTF-8',
    'caption_not_text': 'a JSONL caption that is not a string or a number',
    'invalid_json': 'a JSONL line that is not a JSON object',
    'corrupt_tar': 'a truncated webdataset tar: the sample its cut went through, else (once per tar) what followed '
                   'its last whole sample',
}
_MAX_CHUNK = 64  # entries per worker task: big enough to amortise the task, small enough to bound memory


@dataclasses.dataclass(frozen=True)
class Settings:
  """What a worker needs to turn entries into records."""
  source: str
  max_side: int
  max_pixels: int


# ---------------------------------------------------------------------------------------------------------------
# Converting (in worker processes)


def _read_member(member: TarMember, files: dict[str, BinaryIO]) -> bytes:
  if member.path not in files:
    files[member.path] = open(member.path, 'rb')  # pylint: disable=consider-using-with  # closed by the caller
  return read_member(files[member.path], member)


def _caption(entry: Entry, files: dict[str, BinaryIO]) -> str:
  caption = entry.caption
  if isinstance(caption, TarMember):
    try:
      caption = _read_member(caption, files).decode('utf-8')
    except UnicodeDecodeError as error:
      raise records.BadRecordError('caption_not_utf8', str(error)) from error
  elif not text_ok(caption):
    raise records.BadRecordError('caption_not_utf8', 'the caption holds bytes that are not UTF-8')
  caption = caption.strip()
  if not caption:
    raise records.BadRecordError('empty_caption', 'the caption is empty')
  return caption


def _image_bytes(entry: Entry, files: dict[str, BinaryIO]) -> bytes:
  if isinstance(entry.image, TarMember):
    return _read_member(entry.image, files)
  try:
    with open(entry.image, 'rb') as f:
      return f.read()
  except OSError as error:
    raise records.BadRecordError('missing_file', str(error)) from error


def convert_entry(entry: Entry, settings: Settings, files: dict[str, BinaryIO]) -> bytes:
  """One entry -> its serialized record; raises records.BadRecordError with the reason it cannot be used."""
  if entry.skip:
    raise records.BadRecordError(entry.skip, entry.key)
  caption = _caption(entry, files)
  image = prepare_image(_image_bytes(entry, files), settings.max_side, settings.max_pixels)
  return records.serialize({'image': image, 'caption': caption, 'long_caption': entry.long_caption, 'label': -1,
                            'source': settings.source, 'key': entry.key})


def convert_chunk(entries: list[Entry], settings: Settings) -> list[bytes | str]:
  """Each entry -> its serialized record (bytes) or the reason it was skipped (str)."""
  results = []
  files: dict[str, BinaryIO] = {}
  try:
    for entry in entries:
      try:
        results.append(convert_entry(entry, settings, files))
      except records.BadRecordError as bad:
        results.append(bad.reason)
  finally:
    for handle in files.values():
      handle.close()
  return results


def _ordered_map(pool, function: Callable[[Any], Any], tasks: Iterable[Any], window: int
                 ) -> Iterator[tuple[Any, Any]]:
  """(task, function(task)) for each task, in task order. With a pool at most `window` tasks are in flight, which
  bounds the memory that finished but not yet consumed results take."""
  if pool is None:
    for task in tasks:
      yield task, function(task)
    return
  pending = collections.deque()
  for task in tasks:
    pending.append((task, pool.apply_async(function, (task,))))
    if len(pending) >= window:
      task, result = pending.popleft()
      yield task, result.get()
  while pending:
    task, result = pending.popleft()
    yield task, result.get()


# ---------------------------------------------------------------------------------------------------------------
# The conversion


class _Progress:
  """'done/total examples, rate, ETA' lines on stderr (total: None while unknown), at most one a second (every 10 s
  when stderr is not a terminal, to keep logs short)."""

  def __init__(self, total: int | None, enabled: bool):
    self.total, self.enabled = total, enabled
    self.start = self.last = time.monotonic()
    self.interval = 1.0 if sys.stderr.isatty() else 10.0

  def estimate_total(self, total: int) -> None:
    self.total = total

  def update(self, done: int, final: bool = False) -> None:
    now = time.monotonic()
    if not self.enabled or (not final and now - self.last < self.interval):
      return
    self.last = now
    rate = done / max(now - self.start, 1e-9)
    line = f'convert: {done} examples'
    if self.total and not final:
      eta = round(max(self.total - done, 0) / rate) if rate else 0
      line = (f'convert: {done}/{self.total} examples ({100 * done / self.total:.0f}%), '
              f'ETA {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}')
    print(f'{line}, {rate:.0f}/s', end='\r' if sys.stderr.isatty() and not final else '\n', file=sys.stderr,
          flush=True)


def default_source(input_path: str) -> str:
  """The source name for an input: its file name without extension, or its folder's name (for a glob, the folder
  before the first wildcard)."""
  if has_wildcard(input_path):
    input_path = os.path.dirname(input_path[:min(input_path.find(c) for c in '*?[' if c in input_path)])
  path = os.path.abspath(input_path)
  name = os.path.basename(path)
  return os.path.splitext(name)[0] if os.path.isfile(path) else name


def input_format(name: str) -> InputFormat:
  """The format --format names; ConvertError listing the formats for an unknown one."""
  format_class = INPUT_FORMATS.get(name, None)
  if format_class is None:
    raise ConvertError(f"--format '{name}' is not known; valid formats: {', '.join(INPUT_FORMATS)}")
  return format_class()


def resolve_options(layout: InputFormat, input_path: str, image_column: str | None, caption_column: str | None,
                    image_keys: str | Iterable[str], caption_key: str, jsonl: str | None, long_captions: str | None,
                    source: str | None, max_side: int, max_pixels: int, prefix: str,
                    examples_per_shard: int) -> Options:
  """The options that shape the output, checked and with the format's defaults filled in."""
  if examples_per_shard < 1 or max_side < 0 or max_pixels < 0:
    raise ConvertError(f'need --examples_per_shard >= 1, --max_side >= 0 and --max_pixels >= 0; got '
                       f'{examples_per_shard}, {max_side}, {max_pixels}')
  if not prefix or '/' in prefix or prefix.startswith('.'):
    raise ConvertError(f"--prefix '{prefix}' must be a plain file-name prefix")
  if isinstance(image_keys, str):
    image_keys = split_image_keys(image_keys)
  options = Options(
      format=layout.name,
      image_column=image_column or layout.default_image_column,
      caption_column=caption_column or 'caption',
      image_keys=tuple(k.strip().lower().lstrip('.') for k in image_keys if k.strip()),
      caption_key=caption_key.lower().lstrip('.'),
      jsonl=layout.metadata_file(input_path, jsonl),
      source=source or default_source(input_path),
      max_side=max_side,
      max_pixels=max_pixels,
      prefix=prefix,
      examples_per_shard=examples_per_shard,
      long_captions=os.path.abspath(long_captions) if long_captions else None)
  layout.check_options(options)
  return options


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
  iterator = iter(items)
  while batch := list(itertools.islice(iterator, size)):
    yield batch


def _write_records(converted: Iterable[tuple[list[Entry], list[bytes | str]]], writer: ShardWriter,
                   skipped: collections.Counter, meter: _Progress) -> tuple[int, int]:
  """(chunk of entries, their results) in input order -> records written, skips counted.

  Returns (records written, how many of them have a long caption)."""
  done = written = matched = 0
  for entries, results in converted:
    for entry, result in zip(entries, results):
      if isinstance(result, bytes):
        writer.write(result)
        written += 1
        matched += bool(entry.long_caption)
      else:
        skipped[result] += 1
    done += len(entries)
    meter.update(done)
  meter.update(done, final=True)
  return written, matched


def convert(fmt: str, input: str, output: str, *, image_column: str | None = None,  # pylint: disable=redefined-builtin
            caption_column: str | None = None, image_keys: str | Iterable[str] = DEFAULT_IMAGE_KEYS,
            caption_key: str = DEFAULT_CAPTION_KEY, jsonl: str | None = None, long_captions: str | None = None,
            source: str | None = None, max_side: int = 0, max_pixels: int = records.DEFAULT_MAX_PIXELS,
            prefix: str = 'train', examples_per_shard: int = 10000, num_workers: int | None = None,
            overwrite: bool = False, progress: bool = True) -> dict[str, Any]:
  """Convert `input` (in format `fmt`, a name in INPUT_FORMATS) into shards under `output`; the options are the CLI
  flags.

  Returns the summary {'written': N, 'skipped': {reason: count}, 'shards': n[, 'long_captions_matched': m]}; when
  `output` already holds this exact conversion, returns its saved summary and writes nothing. With num_workers > 1
  the workers are 'spawn' processes: a script that calls this must do so under `if __name__ == '__main__':`.
  """
  layout = input_format(fmt)
  options = resolve_options(layout, input, image_column, caption_column, image_keys, caption_key, jsonl,
                            long_captions, source, max_side, max_pixels, prefix, examples_per_shard)
  files = layout.input_files(input)
  layout.check_inputs(files, options)
  if long_captions and not os.path.isfile(long_captions):
    raise ConvertError(f'--long_captions {long_captions} does not exist')
  fingerprint = fingerprint_of(layout.index_files(files, options) + ([long_captions] if long_captions else []),
                               options)
  saved, old_files = prepare_output(output, fingerprint, prefix, overwrite)
  if saved is not None:
    if progress:
      print(f'convert: {output} already holds this conversion ({MANIFEST} matches); nothing written', file=sys.stderr)
    return saved
  table = load_long_captions(long_captions) if long_captions else None

  num_workers = max(1, num_workers or os.cpu_count() or 1)
  rows = layout.count_rows(files, options)
  meter = _Progress(rows, progress)
  # Chunks only shape the work, never the output: small enough for every worker to get several.
  chunk = max(1, min(_MAX_CHUNK, math.ceil(rows / (4 * num_workers)))) if rows is not None else _MAX_CHUNK
  skipped: collections.Counter = collections.Counter()
  context = multiprocessing.get_context('spawn')  # fork is unsafe once JAX's threads run in this process
  with (ShardWriter(output, prefix, examples_per_shard) as writer,  # leaving on an error removes its shards
        (context.Pool(num_workers) if num_workers > 1 else contextlib.nullcontext()) as pool):
    reading = Reading(map=functools.partial(_ordered_map, pool, window=4 * num_workers),
                      estimate_total=meter.estimate_total)
    entries = layout.entries(files, options, reading)
    if table is not None:
      entries = with_long_captions(entries, table)
    worker = functools.partial(convert_chunk, settings=Settings(options.source, max_side, max_pixels))
    written, matched = _write_records(_ordered_map(pool, worker, _batches(entries, chunk), 2 * num_workers),
                                      writer, skipped, meter)

  summary: dict[str, Any] = {'written': written, 'skipped': dict(sorted(skipped.items())), 'shards': len(writer.paths)}
  if long_captions:
    summary['long_captions_matched'] = matched
  finish(output, prefix, writer.paths, old_files, {'fingerprint': fingerprint, 'summary': summary})
  if not written:
    print(f'convert: warning: no example of {input} could be used; skipped: {summary["skipped"]}', file=sys.stderr)
  return summary
