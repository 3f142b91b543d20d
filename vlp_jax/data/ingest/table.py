"""Input formats 'tsv' and 'csv': tables with a header row that name an image file and its caption per row
(open_clip's layout: columns `filepath` and `caption`). Image paths resolve against the table's folder."""
from __future__ import annotations

import csv
import os
from typing import Iterator

from vlp_jax.data.ingest.input_format import (INPUT_FORMATS, ConvertError, Entry, InputFormat, Options, Reading,
                                              count_lines, printable)


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
        yield Entry(key=printable(image), image=os.path.join(folder, image) if image else None,
                    caption=_cell(row, caption_index), skip=None if image else 'missing_image_key')
    except csv.Error as error:  # e.g. a field that opens a quote and never closes it swallows the rest of the file
      raise ConvertError(f'{path} line {reader.line_num}: {error} (check for an unbalanced " quote)') from error


class _Table(InputFormat):
  """The files are the tables themselves, read one after the other."""
  delimiter: str

  def count_rows(self, files: list[str], options: Options) -> int:
    return count_lines(files) - len(files)  # less one header row per file

  def entries(self, files: list[str], options: Options, reading: Reading) -> Iterator[Entry]:
    for path in files:
      yield from read_table(path, self.delimiter, options.image_column, options.caption_column)


@INPUT_FORMATS.register('tsv')
class TsvFormat(_Table):
  suffix, delimiter = '.tsv', '\t'


@INPUT_FORMATS.register('csv')
class CsvFormat(_Table):
  suffix, delimiter = '.csv', ','
