"""Input format 'folder': a folder of images with a metadata file of JSON lines {"file_name": ..., "caption": ...}
(Hugging Face imagefolder's metadata.jsonl). File names resolve against the folder and are the keys."""
from __future__ import annotations

import json
import os
from typing import Iterator

from vlp_jax.data.ingest.input_format import (INPUT_FORMATS, ConvertError, Entry, InputFormat, Options, Reading,
                                              check_exists, count_lines, printable)


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
      yield Entry(key=printable(name), image=None if skip else os.path.join(image_folder, name), caption=caption,
                  skip=skip)


@INPUT_FORMATS.register('folder')
class FolderFormat(InputFormat):
  """--input is the folder of images (no glob); the metadata file (--jsonl) is the index."""
  default_image_column = 'file_name'

  def metadata_file(self, input_path: str, jsonl: str | None) -> str:
    return os.path.abspath(jsonl or os.path.join(input_path, 'metadata.jsonl'))

  def input_files(self, input_path: str) -> list[str]:
    check_exists(input_path)
    if not os.path.isdir(input_path):
      raise ConvertError(f'--format=folder needs --input to be a folder of images, not {input_path}')
    return [input_path]

  def index_files(self, files: list[str], options: Options) -> list[str]:
    return [options.jsonl]

  def check_inputs(self, files: list[str], options: Options) -> None:
    if not os.path.isfile(options.jsonl):
      raise ConvertError(f'{options.jsonl} does not exist: --format=folder reads file_name/caption lines from a '
                         'JSONL file (pass --jsonl; for a metadata.csv use --format=csv --image_column=file_name)')

  def count_rows(self, files: list[str], options: Options) -> int:
    return count_lines([options.jsonl])

  def entries(self, files: list[str], options: Options, reading: Reading) -> Iterator[Entry]:
    yield from read_jsonl(options.jsonl, files[0], options.image_column, options.caption_column)
