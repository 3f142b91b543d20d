"""What every input format of the converter shares: the table of formats (`INPUT_FORMATS`, chosen by --format), the
interface a format implements (`InputFormat`), the entries it reads (`Entry`), the options of a conversion
(`Options`) and its request error (`ConvertError`).
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
from typing import Any, Callable, Iterable, Iterator

from vlp_jax import errors
from vlp_jax.data.sources.webdataset_tars import TarMember
from vlp_jax.registry import Registry


class ConvertError(errors.ConfigError):
  """The arguments or the inputs as a whole cannot be converted; the message says what to fix. Exit code 2."""


@dataclasses.dataclass(frozen=True)
class Entry:
  """One input example before conversion.

  image: a file path or a TarMember (None: the example names no image); caption: the text, or a TarMember holding
  UTF-8 text; skip: a reason already known from the index alone (then nothing is read).
  """
  key: str
  image: str | TarMember | None
  caption: str | TarMember
  long_caption: str = ''
  skip: str | None = None


@dataclasses.dataclass(frozen=True)
class Options:
  """The options that shape a conversion's output, checked and with defaults filled in; they go into its manifest
  (in this order, so keep it). `jsonl`: the metadata file of a format that reads one, else None."""
  format: str
  image_column: str
  caption_column: str
  image_keys: tuple[str, ...]
  caption_key: str
  jsonl: str | None
  source: str
  max_side: int
  max_pixels: int
  prefix: str
  examples_per_shard: int
  long_captions: str | None


@dataclasses.dataclass
class Reading:
  """What a format may use while it reads its entries, besides its files.

  map(function, tasks): (task, function(task)) pairs in task order, computed by the worker processes (function
  must be picklable: a module-level function or a functools.partial of one). estimate_total(n): the progress
  display's expected example count. Whatever a format loses is an entry too (with `skip` set), so that the progress
  and the summary count the same examples.
  """
  map: Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[tuple[Any, Any]]]
  estimate_total: Callable[[int], None]


class InputFormat:
  """One layout of input data. A format is a subclass registered with `@INPUT_FORMATS.register('name')` (the
  --format value) in a module of this package; the defaults below suit formats whose index files are found by
  --input (a file, a glob, or a folder of files ending in `suffix`) and fingerprinted as they are.
  """
  name: str  # set by INPUT_FORMATS.register
  suffix: str = ''  # in a folder given as --input, the index files are those with this ending
  default_image_column: str = 'filepath'

  def metadata_file(self, input_path: str, jsonl: str | None) -> str | None:
    """The metadata file the format reads its index from (the --jsonl option, with its default); None if none."""
    del input_path, jsonl
    return None

  def check_options(self, options: Options) -> None:
    """Raises ConvertError for options this format cannot work with."""

  def input_files(self, input_path: str) -> list[str]:
    """The files a conversion reads its index from, sorted (a glob's matches, the file, or the folder's files
    ending in `suffix`)."""
    if has_wildcard(input_path):
      paths = sorted(p for p in glob.glob(input_path) if os.path.isfile(p))
      if not paths:
        raise ConvertError(f'--input {input_path} matches no files')
      return paths
    check_exists(input_path)
    if not os.path.isdir(input_path):
      return [input_path]
    paths = sorted(os.path.join(input_path, f) for f in os.listdir(input_path) if f.endswith(self.suffix))
    if not paths:
      raise ConvertError(f'--input {input_path} is a folder with no {self.suffix} files in it')
    return paths

  def index_files(self, files: list[str], options: Options) -> list[str]:
    """The files whose path, size and mtime identify the input in the manifest."""
    del options
    return files

  def check_inputs(self, files: list[str], options: Options) -> None:
    """Raises ConvertError for inputs that cannot be read as a whole (before anything is written)."""

  def count_rows(self, files: list[str], options: Options) -> int | None:
    """About how many examples the input holds, for the progress display; None when unknown before reading."""
    del files, options
    return None

  def entries(self, files: list[str], options: Options, reading: Reading) -> Iterator[Entry]:
    """Every example of the input, in input order, read lazily."""
    raise NotImplementedError


# The formats, by --format value. The package's __init__ imports the built-in ones first, which fixes the order
# that messages list them in; any other module of the package that registers one adds it after them.
INPUT_FORMATS: Registry[type[InputFormat]] = Registry('input format', 'format', package='vlp_jax.data.ingest')


def has_wildcard(path: str) -> bool:
  return any(c in path for c in '*?[')


def check_exists(input_path: str) -> None:
  if not os.path.exists(input_path):
    raise ConvertError(f'--input {input_path} does not exist')


def text_ok(text: str) -> bool:
  """False for text holding undecodable bytes (lone surrogates from errors='surrogateescape')."""
  try:
    text.encode('utf-8')
    return True
  except UnicodeEncodeError:
    return False


def printable(text: str) -> str:
  """Text that msgpack can store: undecodable bytes become backslash escapes (stable, never an error)."""
  return text if text_ok(text) else text.encode('utf-8', 'backslashreplace').decode('utf-8')


def count_lines(paths: list[str]) -> int:
  """Newlines in the files: about the number of TSV/CSV/JSONL rows, for the progress display."""
  total = 0
  for path in paths:
    with open(path, 'rb') as f:
      for block in iter(functools.partial(f.read, 1 << 20), b''):
        total += block.count(b'\n')
  return total
