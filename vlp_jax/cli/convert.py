"""Convert image-text data into ArrayRecord shards in the vlp_jax record format (vlp_jax/data/records.py).

  # an img2dataset webdataset output (a folder of .tar files)
  python -m vlp_jax.convert --format=webdataset --input=/data/cc3m_wds --output=/data/cc3m --source=cc3m
  # a TSV with `filepath` and `caption` columns (open_clip's layout); relative paths resolve against the TSV's folder
  python -m vlp_jax.convert --format=tsv --input=/data/cc3m/train.tsv --output=/data/cc3m_ar \
      --long_captions=/data/dreamlip_cc3m.json --max_side=512
  # a folder of images with metadata.jsonl lines {"file_name": ..., "caption": ...} (Hugging Face imagefolder)
  python -m vlp_jax.convert --format=folder --input=/data/pets --output=/data/pets_ar

then train with --config.data.name=array_record --config.data.path=OUTPUT.

Every usable example becomes one record: the image (its original bytes when it is a plain RGB or grey JPEG / PNG /
WebP within --max_side, else re-encoded as RGB), the caption, the long caption ('' without a match in
--long_captions), label -1, the source name and a stable key (the TSV/CSV filepath as written, the webdataset sample
key, or the folder's file_name). Unusable examples are skipped and counted by reason (INPUT_SKIP_REASONS). The run ends
with one JSON line on stdout, e.g.
  {"written": 9875, "skipped": {"corrupt_image": 3, "missing_file": 122}, "shards": 1}

Shards `{prefix}-{i:05d}-of-{n:05d}.array_record` hold --examples_per_shard records each (the last one fewer), in
input order, and their bytes do not depend on --num_workers. `convert_manifest.json` in the output folder records the
inputs (path, size and mtime of each TSV / JSONL / tar / long-caption file; the image files a TSV or JSONL names are
not checked) and the options: running the same conversion again prints the saved summary and writes nothing, and a
different conversion into a folder that already holds shards is refused unless --overwrite.
"""
from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import functools
import glob
import io
import itertools
import json
import math
import multiprocessing
import os
import re
import sys
import tempfile
import time
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from absl import flags
from array_record.python.array_record_module import ArrayRecordWriter
from PIL import Image, ImageFile

from vlp_jax import errors
from vlp_jax.cli import common
from vlp_jax.data import records
from vlp_jax.data.webdataset import TarMember, compression_of, read_member, tar_samples

FORMATS = ('tsv', 'csv', 'webdataset', 'folder')
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
    'corrupt_tar': 'a webdataset tar (counted once) or a sample in it that could not be read to the end',
}
MANIFEST = 'convert_manifest.json'
MANIFEST_VERSION = 1  # bump when the records a conversion writes change, so old manifests no longer match
DEFAULT_IMAGE_KEYS = 'jpg;png;jpeg;webp'
WRITER_OPTIONS = 'group_size:1'  # as records.write_shards: any record can be read at random

_KEPT_FORMATS = ('JPEG', 'PNG', 'WEBP')  # stored as they are when plain; everything else is re-encoded
_PLAIN_MODES = ('RGB', 'L', '1', 'P')  # modes whose PIL conversion to RGB is exact (P: when without transparency)
_LOSSY_FORMATS = ('JPEG', 'MPO', 'WEBP', 'JPEG2000')  # re-encoded as JPEG; other sources as PNG
_ORIENTATION_TAG = 0x0112
_UNDO_ORIENTATION = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
                     4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270,
                     7: Image.Transpose.TRANSVERSE, 8: Image.Transpose.ROTATE_90}
_MAX_CHUNK = 64  # entries per worker task: big enough to amortise the task, small enough to bound memory


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
class Settings:
  """What a worker needs to turn entries into records."""
  source: str
  max_side: int
  max_pixels: int


def _has_wildcard(path: str) -> bool:
  return any(c in path for c in '*?[')


def _text_ok(text: str) -> bool:
  """False for text holding undecodable bytes (lone surrogates from errors='surrogateescape')."""
  try:
    text.encode('utf-8')
    return True
  except UnicodeEncodeError:
    return False


def _printable(text: str) -> str:
  """Text that msgpack can store: undecodable bytes become backslash escapes (stable, never an error)."""
  return text if _text_ok(text) else text.encode('utf-8', 'backslashreplace').decode('utf-8')


# ---------------------------------------------------------------------------------------------------------------
# Images


@contextlib.contextmanager
def _strict_pil():
  """PIL set up for checking images: truncated files fail, and its own bomb check is off (we apply --max_pixels from
  the header ourselves, so that a raised --max_pixels is honoured). Restored afterwards."""
  saved = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
  Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = None, False
  try:
    yield
  finally:
    Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = saved


def fit_size(width: int, height: int, max_side: int) -> tuple[int, int]:
  """(width, height) scaled so that the longer side is at most `max_side` (0: no limit), aspect kept, never up."""
  if not max_side or max(width, height) <= max_side:
    return width, height
  scale = max_side / max(width, height)
  return max(1, round(width * scale)), max(1, round(height * scale))


def _orientation(image: Image.Image) -> int:
  """The EXIF orientation (1 = upright; unreadable EXIF counts as upright)."""
  try:
    value = image.getexif().get(_ORIENTATION_TAG, 1)
  except Exception:  # pylint: disable=broad-except  # EXIF parsers raise many types on junk
    return 1
  return value if value in _UNDO_ORIENTATION else 1


def _is_plain(image: Image.Image, data: bytes) -> bool:
  """Whether the training decoder gets exactly the right RGB from these bytes with a plain PIL convert('RGB')."""
  if image.format not in _KEPT_FORMATS or image.mode not in _PLAIN_MODES or 'transparency' in image.info:
    return False
  return not (image.format == 'PNG' and data[24:25] == b'\x10')  # IHDR bit depth 16: store the 8-bit version


def _encode(image: Image.Image, lossless: bool) -> bytes:
  """A fresh RGB image (no ICC profile or EXIF of the source) -> PNG or JPEG quality 95 bytes."""
  buffer = io.BytesIO()
  if lossless:
    image.save(buffer, format='PNG')
  else:
    image.save(buffer, format='JPEG', quality=95)
  return buffer.getvalue()


def prepare_image(data: bytes, max_side: int = 0, max_pixels: int = records.DEFAULT_MAX_PIXELS) -> bytes:
  """Encoded image -> the bytes to store in a record.

  The same bytes when the image is a plain (see `_is_plain`) JPEG / PNG / WebP, upright, with a longer side within
  `max_side` (0: any). Otherwise the image is turned into correct RGB (records.to_rgb: alpha on white, 16-bit scaled),
  turned upright by its EXIF orientation, shrunk to `max_side` (bicubic) and re-encoded: as JPEG quality 95 when
  shrunk or from a lossy format, else as PNG. Raises records.BadRecordError with reason 'empty_image', 'too_large'
  (more than `max_pixels` pixels, 0: any; checked from the header) or 'corrupt_image' (undecodable or truncated).
  """
  if not data:
    raise records.BadRecordError('empty_image', 'the file has 0 bytes')
  with _strict_pil():
    try:
      image = Image.open(io.BytesIO(data))
    except Exception as error:  # pylint: disable=broad-except  # PIL raises many types on bad bytes
      raise records.BadRecordError('corrupt_image', f'{type(error).__name__}: {error}') from error
    with image:
      width, height = image.size
      if width * height == 0:
        raise records.BadRecordError('empty_image', f'the image is {width}x{height}')
      if max_pixels and width * height > max_pixels:
        raise records.BadRecordError('too_large', f'the image is {width}x{height}, more than {max_pixels} pixels')
      fitted, orientation = fit_size(width, height, max_side), _orientation(image)
      keep = fitted == (width, height) and orientation == 1 and _is_plain(image, data)
      try:
        if fitted != (width, height) and image.format == 'JPEG':
          image.draft(None, (2 * fitted[0], 2 * fitted[1]))  # decode at a reduced scale, like Image.thumbnail
        image.load()
        if keep:
          return data
        rgb = Image.fromarray(records.to_rgb(image))
      except Exception as error:  # pylint: disable=broad-except
        raise records.BadRecordError('corrupt_image', f'{type(error).__name__}: {error}') from error
      lossless = fitted == (width, height) and image.format not in _LOSSY_FORMATS
  if orientation != 1:
    rgb = rgb.transpose(_UNDO_ORIENTATION[orientation])
    if orientation >= 5:  # a quarter turn: the fitted size turns too
      fitted = fitted[::-1]
  if rgb.size != fitted:
    rgb = rgb.resize(fitted, Image.Resampling.BICUBIC)
  return _encode(rgb, lossless)


# ---------------------------------------------------------------------------------------------------------------
# Reading the inputs: the index of every example, in input order


def input_files(fmt: str, input_path: str) -> list[str]:
  """The files a conversion reads its index from (TSV/CSV files or tar files, sorted; for 'folder' the folder)."""
  if _has_wildcard(input_path) and fmt != 'folder':
    paths = sorted(p for p in glob.glob(input_path) if os.path.isfile(p))
    if not paths:
      raise ConvertError(f'--input {input_path} matches no files')
    return paths
  if not os.path.exists(input_path):
    raise ConvertError(f'--input {input_path} does not exist')
  if fmt == 'folder':
    if not os.path.isdir(input_path):
      raise ConvertError(f'--format=folder needs --input to be a folder of images, not {input_path}')
    return [input_path]
  if not os.path.isdir(input_path):
    return [input_path]
  suffix = {'tsv': '.tsv', 'csv': '.csv', 'webdataset': '.tar'}[fmt]
  paths = sorted(os.path.join(input_path, f) for f in os.listdir(input_path) if f.endswith(suffix))
  if not paths:
    raise ConvertError(f'--input {input_path} is a folder with no {suffix} files in it')
  return paths


def _cell(row: list[str], index: int) -> str:
  return row[index].strip() if index < len(row) else ''


def read_table(path: str, delimiter: str, image_column: str, caption_column: str) -> Iterator[Entry]:
  """The entries of one TSV/CSV file with a header row, in file order.

  Read as UTF-8 with undecodable bytes kept as escapes, so that a bad row is skipped ('caption_not_utf8') rather than
  failing the file. Image paths resolve against the file's folder; the key is the path as written.
  """
  folder = os.path.dirname(os.path.abspath(path))
  with open(path, encoding='utf-8-sig', errors='surrogateescape', newline='') as f:
    reader = csv.reader(f, delimiter=delimiter)
    header = next(reader, [])
    missing = [c for c in (image_column, caption_column) if c not in header]
    if missing:
      hint = ' (it looks comma-separated: use --format=csv)' if len(header) == 1 and ',' in header[0] else ''
      raise ConvertError(f'{path} has no column{"s" if len(missing) > 1 else ""} {" and ".join(map(repr, missing))}; '
                         f'its columns are {header}{hint}. Name the columns with --image_column and --caption_column.')
    image_index, caption_index = header.index(image_column), header.index(caption_column)
    try:
      for row in reader:
        if not row:  # a blank line
          continue
        image = _cell(row, image_index)
        yield Entry(key=_printable(image), image=os.path.join(folder, image) if image else None,
                    caption=_cell(row, caption_index), skip=None if image else 'missing_image_key')
    except csv.Error as error:  # e.g. a field that opens a quote and never closes it swallows the rest of the file
      raise ConvertError(f'{path} line {reader.line_num}: {error} (check for an unbalanced " quote)') from error


def read_jsonl(jsonl: str, image_folder: str, image_column: str, caption_column: str) -> Iterator[Entry]:
  """The entries of a Hugging Face imagefolder metadata file: one JSON object per line; file names resolve against
  `image_folder` and are the keys."""
  with open(jsonl, encoding='utf-8', errors='surrogateescape') as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except ValueError:
        row = None
      if not isinstance(row, dict):
        yield Entry(key=f'{jsonl}:{number}', image=None, caption='', skip='invalid_json')
        continue
      name, caption = row.get(image_column), row.get(caption_column)
      skip = None
      if not isinstance(name, str) or not name.strip():
        name, skip = f'{jsonl}:{number}', 'missing_image_key'
      if caption is None:
        caption = ''
      elif isinstance(caption, (int, float)) and not isinstance(caption, bool):
        caption = str(caption)
      elif not isinstance(caption, str):
        caption, skip = '', skip or 'caption_not_text'
      yield Entry(key=_printable(name), image=None if skip else os.path.join(image_folder, name), caption=caption,
                  skip=skip)


def read_tar(path: str, image_keys: tuple[str, ...], caption_key: str) -> tuple[list[Entry], bool]:
  """The samples of one uncompressed webdataset tar in order of first appearance -> (entries, whether the tar broke
  off with a read error; the samples listed before it are kept)."""
  samples, broken = tar_samples(path)
  entries = []
  for key, members in samples.items():
    image = next((members[k] for k in image_keys if k in members), None)
    caption = members.get(caption_key)
    skip = 'missing_image_key' if image is None else 'missing_caption_key' if caption is None else None
    entries.append(Entry(key=key, image=image, caption=caption or '', skip=skip))
  if broken and entries and entries[-1].skip:  # members after the break are lost: not a missing key, a broken tar
    entries[-1] = dataclasses.replace(entries[-1], skip='corrupt_tar')
  return entries, broken


def _check_uncompressed(path: str) -> None:
  compression = compression_of(path)
  if compression:
    raise ConvertError(f'{path} is a {compression}-compressed tar; decompress it first (the converter reads members '
                       'by offset from plain .tar files, as img2dataset writes them)')


def _as_sentence(caption: str) -> str:
  """'a dog on grass' -> 'a dog on grass.'; a caption ending in . ! or ? is kept as it is (stripped)."""
  caption = caption.strip()
  return caption if caption.endswith(('.', '!', '?')) else caption + '.'


def load_long_captions(path: str) -> dict[str, str]:
  """A DreamLIP-style JSON object {image id: long caption, or a list of caption strings}. A list is joined into one
  text in which each caption ends a sentence (a full stop is added where it has no end mark), so COSMOS's text crops
  (data/text_crops.py splits at sentence ends) never merge two captions into one pool sentence."""
  try:
    with open(path, encoding='utf-8') as f:
      table = json.load(f)
  except (OSError, ValueError) as error:
    raise ConvertError(f'cannot read --long_captions {path}: {error}') from error
  if not isinstance(table, dict):
    raise ConvertError(f'--long_captions {path} must hold a JSON object {{image id: caption}}, not a '
                       f'{type(table).__name__}')
  captions = {}
  for key, value in table.items():
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
      value = ' '.join(_as_sentence(v) for v in value if v.strip())
    if not isinstance(value, str):
      raise ConvertError(f'--long_captions {path}: the value of {key!r} is a {type(value).__name__}; expected a '
                         'string or a list of strings')
    captions[key] = value.strip()
  return captions


def _image_name(entry: Entry) -> str:
  image = entry.image
  return image.name if isinstance(image, TarMember) else (image or '')


def find_long_caption(captions: dict[str, str], key: str, image_name: str) -> str | None:
  """The long caption of an example: by its key, else its image's basename, else that basename without extension."""
  basename = os.path.basename(image_name)
  for candidate in (key, basename, os.path.splitext(basename)[0]):
    if candidate in captions:
      return captions[candidate]
  return None


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
  elif not _text_ok(caption):
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
# Writing


class _Progress:
  """'done/total examples, rate, ETA' lines on stderr (total: None while unknown), at most one a second (every 10 s
  when stderr is not a terminal, to keep logs short)."""

  def __init__(self, total: int | None, enabled: bool):
    self.total, self.enabled = total, enabled
    self.start = self.last = time.monotonic()
    self.interval = 1.0 if sys.stderr.isatty() else 10.0

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


class _ShardWriter:
  """Records into temporary shards of `per_shard` records each, named `.{prefix}-{i:05d}.array_record.tmp` (hidden
  from `*.array_record` globs); `close` returns their paths, renamed into place once the total is known."""

  def __init__(self, directory: str, prefix: str, per_shard: int):
    self.directory, self.prefix, self.per_shard = directory, prefix, per_shard
    self.paths: list[str] = []
    self._writer, self._count = None, 0

  def write(self, record: bytes) -> None:
    if self._writer is None or self._count == self.per_shard:
      self._close_current()
      self.paths.append(temporary_shard_path(self.directory, self.prefix, len(self.paths)))
      self._writer, self._count = ArrayRecordWriter(self.paths[-1], WRITER_OPTIONS), 0
    self._writer.write(record)
    self._count += 1

  def _close_current(self) -> None:
    writer, self._writer = self._writer, None
    if writer is not None:
      writer.close()

  def close(self) -> list[str]:
    self._close_current()
    return self.paths


def temporary_shard_path(directory: str, prefix: str, index: int) -> str:
  return os.path.join(directory, f'.{prefix}-{index:05d}.array_record.tmp')


def shard_name(prefix: str, index: int, count: int) -> str:
  return f'{prefix}-{index:05d}-of-{count:05d}.array_record'


def _is_our_file(name: str, prefixes: Iterable[str]) -> bool:
  """Whether `name` is a shard or a leftover temporary shard that a conversion with one of `prefixes` writes."""
  return any(re.fullmatch(rf'\.?{re.escape(p)}-\d{{5,}}(-of-\d{{5,}}\.array_record|\.array_record\.tmp)', name)
             for p in prefixes)


# ---------------------------------------------------------------------------------------------------------------
# Manifest: what makes a second identical run a no-op


def _fingerprint(files: list[str], options: dict[str, Any]) -> dict[str, Any]:
  """The inputs (absolute path, size, mtime of each index file) and the options that shape the output."""
  inputs = []
  for path in files:
    stat = os.stat(path)
    inputs.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
  return json.loads(json.dumps({'version': MANIFEST_VERSION, 'options': options, 'inputs': inputs}))


def _read_manifest(directory: str) -> dict[str, Any] | None:
  """The manifest of an earlier conversion into `directory`; {} when one is there but unreadable."""
  path = os.path.join(directory, MANIFEST)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      manifest = json.load(f)
    return manifest if isinstance(manifest, dict) else {}
  except (OSError, ValueError):
    return {}


def _shards_intact(directory: str, manifest: dict[str, Any]) -> bool:
  try:
    return all(os.path.getsize(os.path.join(directory, s['name'])) == s['size'] for s in manifest['shards'])
  except (OSError, KeyError, TypeError):
    return False


def _write_json(path: str, value: Any) -> None:
  tmp = f'{path}.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=1)
    f.write('\n')
  os.replace(tmp, path)


def _prepare_output(output: str, fingerprint: dict[str, Any], prefix: str, overwrite: bool
                    ) -> tuple[dict[str, Any] | None, list[str]]:
  """-> (the saved summary when `output` already holds this very conversion, else None; the files of ours to remove
  once the new shards are ready). Raises ConvertError when `output` holds other shards and not `overwrite`."""
  manifest = _read_manifest(output) if os.path.isdir(output) else None
  if manifest is not None and manifest.get('fingerprint') == fingerprint and _shards_intact(output, manifest):
    return manifest['summary'], []
  if os.path.exists(output) and not os.path.isdir(output):
    raise ConvertError(f'--output {output} is a file; it must be a folder (or not exist yet)')
  try:
    os.makedirs(output, exist_ok=True)
    with tempfile.TemporaryFile(dir=output):
      pass
  except OSError as error:
    raise ConvertError(f'--output {output} is not writable: {error.strerror or error}') from error
  names = sorted(os.listdir(output))
  shards = [n for n in names if n.endswith('.array_record')]
  same = manifest is not None and manifest.get('fingerprint') == fingerprint  # the same conversion, left damaged
  if (shards or manifest is not None) and not same and not overwrite:
    what = 'a different conversion (its convert_manifest.json does not match)' if manifest is not None else (
        f'ArrayRecord files from elsewhere ({", ".join(shards[:3])}{", ..." if len(shards) > 3 else ""})')
    raise ConvertError(f'--output {output} already holds {what}. Pass --overwrite to replace the shards of the '
                       'earlier conversion (only its shards and manifest are removed), or choose another --output.')
  old_prefix = (manifest or {}).get('fingerprint', {}).get('options', {}).get('prefix', prefix)
  listed = {s.get('name') for s in (manifest or {}).get('shards', []) if isinstance(s, dict)}
  ours = [n for n in names if n in listed or _is_our_file(n, (prefix, old_prefix))]
  foreign = [n for n in shards if n not in ours]
  if foreign:
    print(f'convert: warning: {output} also holds {len(foreign)} ArrayRecord files this converter did not write '
          f'({", ".join(foreign[:3])}); they are kept, and training on the folder reads them too', file=sys.stderr)
  for name in ours:  # leftover temporary shards of a crashed run go now; old shards once the new ones are ready
    if name.endswith('.tmp'):
      os.remove(os.path.join(output, name))
  return None, ([MANIFEST] if manifest is not None else []) + [n for n in ours if not n.endswith('.tmp')]


# ---------------------------------------------------------------------------------------------------------------
# The conversion


def default_source(input_path: str) -> str:
  """The source name for an input: its file name without extension, or its folder's name (for a glob, the folder
  before the first wildcard)."""
  if _has_wildcard(input_path):
    input_path = os.path.dirname(input_path[:min(input_path.find(c) for c in '*?[' if c in input_path)])
  path = os.path.abspath(input_path)
  name = os.path.basename(path)
  return os.path.splitext(name)[0] if os.path.isfile(path) else name


def _resolve_options(fmt: str, input_path: str, image_column: str | None, caption_column: str | None,
                     image_keys: str | Iterable[str], caption_key: str, jsonl: str | None, source: str | None,
                     max_side: int, max_pixels: int, prefix: str, examples_per_shard: int) -> dict[str, Any]:
  """The options that shape the output, checked and with defaults filled in (they go into the manifest)."""
  if fmt not in FORMATS:
    raise ConvertError(f"--format '{fmt}' is not known; valid formats: {', '.join(FORMATS)}")
  if examples_per_shard < 1 or max_side < 0 or max_pixels < 0:
    raise ConvertError(f'need --examples_per_shard >= 1, --max_side >= 0 and --max_pixels >= 0; got '
                       f'{examples_per_shard}, {max_side}, {max_pixels}')
  if not prefix or '/' in prefix or prefix.startswith('.'):
    raise ConvertError(f"--prefix '{prefix}' must be a plain file-name prefix")
  if isinstance(image_keys, str):
    image_keys = image_keys.split(';')
  image_keys = [k.strip().lower().lstrip('.') for k in image_keys if k.strip()]
  if fmt == 'webdataset' and not image_keys:
    raise ConvertError('--image_keys is empty; give the image extensions to look for, e.g. jpg;png;jpeg;webp')
  folder_format = fmt == 'folder'
  return {
      'format': fmt,
      'image_column': image_column or ('file_name' if folder_format else 'filepath'),
      'caption_column': caption_column or 'caption',
      'image_keys': image_keys,
      'caption_key': caption_key.lower().lstrip('.'),
      'jsonl': os.path.abspath(jsonl or os.path.join(input_path, 'metadata.jsonl')) if folder_format else None,
      'source': source or default_source(input_path),
      'max_side': max_side,
      'max_pixels': max_pixels,
      'prefix': prefix,
      'examples_per_shard': examples_per_shard,
  }


def _count_lines(paths: list[str]) -> int:
  """Newlines in the files: about the number of TSV/CSV/JSONL rows, for the progress display."""
  total = 0
  for path in paths:
    with open(path, 'rb') as f:
      for block in iter(functools.partial(f.read, 1 << 20), b''):
        total += block.count(b'\n')
  return total


def _entries(options: dict[str, Any], files: list[str], pool, window: int, skipped: collections.Counter,
             meter: _Progress) -> Iterator[Entry]:
  """Every example of the input in input order, read lazily. Broken tars are counted in `skipped`; for webdataset
  `meter.total` is estimated from the tars listed so far (read ahead by up to `window` tars)."""
  fmt = options['format']
  if fmt in ('tsv', 'csv'):
    for path in files:
      yield from read_table(path, '\t' if fmt == 'tsv' else ',', options['image_column'], options['caption_column'])
  elif fmt == 'folder':
    yield from read_jsonl(options['jsonl'], files[0], options['image_column'], options['caption_column'])
  else:
    lister = functools.partial(read_tar, image_keys=tuple(options['image_keys']), caption_key=options['caption_key'])
    samples = 0
    for listed, (path, (tar_entries, broken)) in enumerate(_ordered_map(pool, lister, files, window), 1):
      samples += len(tar_entries)
      meter.total = round(samples / listed * len(files))
      if broken:
        skipped['corrupt_tar'] += 1
        print(f'convert: warning: {path} broke off with a read error; kept the {len(tar_entries)} samples before it',
              file=sys.stderr)
      yield from tar_entries


def _with_long_captions(entries: Iterable[Entry], table: dict[str, str]) -> Iterator[Entry]:
  for entry in entries:
    found = find_long_caption(table, entry.key, _image_name(entry))
    yield dataclasses.replace(entry, long_caption=found) if found else entry


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
  iterator = iter(items)
  while batch := list(itertools.islice(iterator, size)):
    yield batch


def _write_records(converted: Iterable[tuple[list[Entry], list[bytes | str]]], writer: _ShardWriter,
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


def _finish(output: str, prefix: str, temporary: list[str], old_files: list[str], manifest: dict[str, Any]) -> None:
  """Replaces an earlier conversion's files by the new shards (renamed into place) and writes the manifest last."""
  for name in old_files:  # the old manifest goes first: a crash from here on never leaves a manifest that lies
    os.remove(os.path.join(output, name))
  names = [shard_name(prefix, i, len(temporary)) for i in range(len(temporary))]
  for path, name in zip(temporary, names):
    os.replace(path, os.path.join(output, name))
  manifest['shards'] = [{'name': n, 'size': os.path.getsize(os.path.join(output, n))} for n in names]
  _write_json(os.path.join(output, MANIFEST), manifest)


def convert(fmt: str, input: str, output: str, *, image_column: str | None = None,  # pylint: disable=redefined-builtin
            caption_column: str | None = None, image_keys: str | Iterable[str] = DEFAULT_IMAGE_KEYS,
            caption_key: str = 'txt', jsonl: str | None = None, long_captions: str | None = None,
            source: str | None = None, max_side: int = 0, max_pixels: int = records.DEFAULT_MAX_PIXELS,
            prefix: str = 'train', examples_per_shard: int = 10000, num_workers: int | None = None,
            overwrite: bool = False, progress: bool = True) -> dict[str, Any]:
  """Convert `input` (in format `fmt`, one of FORMATS) into shards under `output`; the options are the CLI flags.

  Returns the summary {'written': N, 'skipped': {reason: count}, 'shards': n[, 'long_captions_matched': m]}; when
  `output` already holds this exact conversion, returns its saved summary and writes nothing. With num_workers > 1
  the workers are 'spawn' processes: a script that calls this must do so under `if __name__ == '__main__':`.
  """
  options = _resolve_options(fmt, input, image_column, caption_column, image_keys, caption_key, jsonl, source,
                             max_side, max_pixels, prefix, examples_per_shard)
  files = input_files(fmt, input)
  index_files = [options['jsonl']] if fmt == 'folder' else files
  if fmt == 'folder' and not os.path.isfile(options['jsonl']):
    raise ConvertError(f'{options["jsonl"]} does not exist: --format=folder reads file_name/caption lines from a '
                       'JSONL file (pass --jsonl; for a metadata.csv use --format=csv --image_column=file_name)')
  if fmt == 'webdataset':
    for path in files:
      _check_uncompressed(path)
  options['long_captions'] = os.path.abspath(long_captions) if long_captions else None
  if long_captions and not os.path.isfile(long_captions):
    raise ConvertError(f'--long_captions {long_captions} does not exist')
  fingerprint = _fingerprint(index_files + ([long_captions] if long_captions else []), options)
  saved, old_files = _prepare_output(output, fingerprint, prefix, overwrite)
  if saved is not None:
    if progress:
      print(f'convert: {output} already holds this conversion ({MANIFEST} matches); nothing written', file=sys.stderr)
    return saved
  table = load_long_captions(long_captions) if long_captions else None

  num_workers = max(1, num_workers or os.cpu_count() or 1)
  header_rows = len(files) if fmt in ('tsv', 'csv') else 0
  rows = None if fmt == 'webdataset' else _count_lines(index_files) - header_rows
  meter = _Progress(rows, progress)
  # Chunks only shape the work, never the output: small enough for every worker to get several.
  chunk = max(1, min(_MAX_CHUNK, math.ceil(rows / (4 * num_workers)))) if rows is not None else _MAX_CHUNK
  skipped: collections.Counter = collections.Counter()
  writer = _ShardWriter(output, prefix, examples_per_shard)
  context = multiprocessing.get_context('spawn')  # fork is unsafe once JAX's threads run in this process
  try:
    with (context.Pool(num_workers) if num_workers > 1 else contextlib.nullcontext()) as pool:
      entries = _entries(options, files, pool, 4 * num_workers, skipped, meter)
      if table is not None:
        entries = _with_long_captions(entries, table)
      worker = functools.partial(convert_chunk, settings=Settings(options['source'], max_side, max_pixels))
      written, matched = _write_records(_ordered_map(pool, worker, _batches(entries, chunk), 2 * num_workers),
                                        writer, skipped, meter)
    temporary = writer.close()
  except BaseException:
    for path in writer.close():
      with contextlib.suppress(OSError):
        os.remove(path)
    raise

  summary: dict[str, Any] = {'written': written, 'skipped': dict(sorted(skipped.items())), 'shards': len(temporary)}
  if long_captions:
    summary['long_captions_matched'] = matched
  _finish(output, prefix, temporary, old_files, {'fingerprint': fingerprint, 'summary': summary})
  if not written:
    print(f'convert: warning: no example of {input} could be used; skipped: {summary["skipped"]}', file=sys.stderr)
  return summary


# ---------------------------------------------------------------------------------------------------------------
# Command line


# The flags that are keyword arguments of `convert` (besides --format, --input and --output).
OPTION_FLAGS = ('image_column', 'caption_column', 'image_keys', 'caption_key', 'jsonl', 'long_captions', 'source',
                'max_side', 'max_pixels', 'prefix', 'examples_per_shard', 'num_workers', 'overwrite')


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags (--format, --input and --output required)."""
  def string(name, default, help_string):
    flags.DEFINE_string(name, default, help_string, flag_values=flag_values)

  def integer(name, default, help_string):
    flags.DEFINE_integer(name, default, help_string, flag_values=flag_values)

  string('format', None, f'Input layout: {", ".join(FORMATS)}.')
  string('input', None, 'A file, a folder or a glob (for folder: the folder of images).')
  string('output', None, 'The folder to write the shards and the manifest into.')
  string('image_column', None, "Image path column (tsv/csv: 'filepath'; folder JSONL: 'file_name').")
  string('caption_column', None, "Caption column (default 'caption').")
  string('image_keys', DEFAULT_IMAGE_KEYS, 'webdataset: image extensions, the first present wins.')
  string('caption_key', 'txt', 'webdataset: the caption extension.')
  string('jsonl', None, 'folder: the metadata file (default <input>/metadata.jsonl).')
  string('long_captions', None, 'JSON {image id: long caption or list of captions} (DreamLIP).')
  string('source', None, "The records' source name (default: the input's name).")
  integer('max_side', 0, 'Shrink images to this longer side (JPEG 95); 0 keeps them.')
  integer('max_pixels', records.DEFAULT_MAX_PIXELS, 'Skip larger images (0: no limit). The training decoder refuses '
          'images over records.DEFAULT_MAX_PIXELS, so raising this only helps with --max_side.')
  string('prefix', 'train', 'Shard file-name prefix.')
  integer('examples_per_shard', 10000, 'Records per shard.')
  integer('num_workers', None, 'Worker processes (default: os.cpu_count()).')
  flags.DEFINE_bool('overwrite', False, "Replace an earlier, different conversion's shards.", flag_values=flag_values)
  flags.mark_flags_as_required(['format', 'input', 'output'], flag_values=flag_values)


def command(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Run `convert` with the parsed flags and print its summary as one JSON line; raises ConvertError."""
  del argv
  options = {name: flag_values[name].value for name in OPTION_FLAGS}
  summary = convert(flag_values['format'].value, flag_values['input'].value, flag_values['output'].value, **options)
  print(json.dumps(summary), flush=True)


def run_command() -> None:
  """The command line: `python -m vlp_jax.convert`."""
  common.run(command, define_flags)


if __name__ == '__main__':
  run_command()
