"""Long captions for the converter (--long_captions): a DreamLIP-style JSON table {image id: long caption}, matched to
each example by its key, then its image's basename, then that basename without extension."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Iterator

from vlp_jax.data.ingest.input_format import ConvertError, Entry
from vlp_jax.data.sources.webdataset_tars import TarMember


def _as_sentence(caption: str) -> str:
  """'a dog on grass' -> 'a dog on grass.'; a caption ending in . ! or ? is kept as it is (stripped)."""
  caption = caption.strip()
  return caption if caption.endswith(('.', '!', '?')) else caption + '.'


def load_long_captions(path: str) -> dict[str, str]:
  """A DreamLIP-style JSON object {image id: long caption, or a list of caption strings}. A list is joined into one
  text in which each caption ends a sentence (a full stop is added where it has no end mark), so COSMOS's text crops
  (data/text/text_crops.py splits at sentence ends) never merge two captions into one pool sentence."""
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


def with_long_captions(entries: Iterable[Entry], captions: dict[str, str]) -> Iterator[Entry]:
  """The entries, each with its long caption (see `find_long_caption`) where it has one."""
  for entry in entries:
    found = find_long_caption(captions, entry.key, _image_name(entry))
    yield dataclasses.replace(entry, long_caption=found) if found else entry
