"""Input format 'webdataset': uncompressed tar files as img2dataset writes them (`KEY.jpg`, `KEY.txt`, ...), read with
the tar helpers of data/sources/webdataset_tars.py. A sample's image is its first member with an --image_keys extension,
its caption the --caption_key member; the sample key is the example's key. A truncated tar counts one 'corrupt_tar'
example for its loss: the sample the cut went through, or a placeholder entry for what followed its last whole sample
(data/sources/webdataset_tars.py), so that the examples read always equal those written plus those skipped."""
from __future__ import annotations

import dataclasses
import functools
import re
import sys
from typing import Iterator

from vlp_jax.data.sources import webdataset_tars as tar_shards
from vlp_jax.data.ingest.input_format import INPUT_FORMATS, ConvertError, Entry, InputFormat, Options, Reading

# as --image_keys takes them, and as config.data.webdataset.image_keys does: 'jpg,png,jpeg,webp'
DEFAULT_IMAGE_KEYS = ','.join(tar_shards.DEFAULT_IMAGE_KEYS)
DEFAULT_CAPTION_KEY = tar_shards.DEFAULT_CAPTION_KEY


def split_image_keys(image_keys: str) -> list[str]:
  """--image_keys 'jpg,png' -> ['jpg', 'png']; ';' separates them too (the flag's separator before it matched the
  config key's ',')."""
  return re.split('[,;]', image_keys)


def read_tar(path: str, image_keys: tuple[str, ...], caption_key: str) -> tuple[list[Entry], str]:
  """The samples of one uncompressed webdataset tar in order of first appearance -> (entries, the tar's truncation:
  '' when whole; then its last entry is skipped as 'corrupt_tar', a placeholder where the cut fell between
  samples)."""
  listing = tar_shards.tar_samples(path)
  entries = []
  for key, members in listing.samples.items():
    image = next((members[k] for k in image_keys if k in members), None)
    caption = members.get(caption_key)
    skip = 'missing_image_key' if image is None else 'missing_caption_key' if caption is None else None
    entries.append(Entry(key=key, image=image, caption=caption or '', skip=skip))
  if listing.truncation:
    if entries and tar_shards.cut_sample([entries[-1].image, entries[-1].caption or None], listing.size):
      entries[-1] = dataclasses.replace(entries[-1], skip='corrupt_tar')  # not a missing key: the cut went through it
    else:
      entries.append(Entry(key=f'{path}: lost after its last whole sample', image=None, caption='', skip='corrupt_tar'))
  return entries, listing.truncation


def check_uncompressed(path: str) -> None:
  compression = tar_shards.compression_of(path)
  if compression:
    raise ConvertError(f'{path} is a {compression}-compressed tar; decompress it first (the converter reads members '
                       'by offset from plain .tar files, as img2dataset writes them)')


@INPUT_FORMATS.register('webdataset')
class WebdatasetFormat(InputFormat):
  """The tars are listed by the worker processes, a few ahead of the conversion; the example count is estimated from
  the tars listed so far."""
  suffix = '.tar'

  def check_options(self, options: Options) -> None:
    if not options.image_keys:
      raise ConvertError('--image_keys is empty; give the image extensions to look for, e.g. jpg,png,jpeg,webp')

  def check_inputs(self, files: list[str], options: Options) -> None:
    for path in files:
      check_uncompressed(path)

  def entries(self, files: list[str], options: Options, reading: Reading) -> Iterator[Entry]:
    lister = functools.partial(read_tar, image_keys=options.image_keys, caption_key=options.caption_key)
    samples = 0
    for listed, (path, (tar_entries, truncation)) in enumerate(reading.map(lister, files), 1):
      samples += len(tar_entries)
      reading.estimate_total(round(samples / listed * len(files)))
      if truncation:
        print(f"convert: warning: {path} is truncated: {truncation}. Its {len(tar_entries) - 1} samples before the "
              "cut are converted; what it lost counts as one 'corrupt_tar'", file=sys.stderr)
      yield from tar_entries
