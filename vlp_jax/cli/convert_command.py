"""Convert image-text data into ArrayRecord shards in the vlp_jax record format (vlp_jax/data/storage/records.py).

  # an img2dataset webdataset output (a folder of .tar files)
  python -m vlp_jax.convert --format=webdataset --input=/data/cc3m_wds --output=/data/cc3m --source=cc3m
  # a TSV with `filepath` and `caption` columns (open_clip's layout); relative paths resolve against the TSV's folder
  python -m vlp_jax.convert --format=tsv --input=/data/cc3m/train.tsv --output=/data/cc3m_ar \\
      --long_captions=/data/dreamlip_cc3m.json --max_side=512
  # a folder of images with metadata.jsonl lines {"file_name": ..., "caption": ...} (Hugging Face imagefolder)
  python -m vlp_jax.convert --format=folder --input=/data/pets --output=/data/pets_ar

then train with --config.data.name=array_record --config.data.path=OUTPUT.

Every usable example becomes one record: the image (its original bytes when it is a plain RGB or grey JPEG / PNG /
WebP within --max_side, else re-encoded as RGB), the caption, the long caption ('' without a match in
--long_captions), label -1, the source name and a stable key (the TSV/CSV filepath as written, the webdataset sample
key, or the folder's file_name). Unusable examples are skipped and counted by reason (INPUT_SKIP_REASONS; a
truncated webdataset tar counts one 'corrupt_tar' for what it lost), so written + skipped is the number of examples
the progress line counted. The run ends with one JSON line on stdout, e.g.
  {"written": 9875, "skipped": {"corrupt_image": 3, "missing_file": 122}, "shards": 1}

Shards `{prefix}-{i:05d}-of-{n:05d}.array_record` hold --examples_per_shard records each (the last one fewer), in
input order, and their bytes do not depend on --num_workers. `convert_manifest.json` in the output folder records the
inputs (path, size and mtime of each TSV / JSONL / tar / long-caption file; the image files a TSV or JSONL names are
not checked) and the options: running the same conversion again prints the saved summary and writes nothing, and a
different conversion into a folder that already holds shards is refused unless --overwrite.
"""
from __future__ import annotations

import json

from absl import flags

from vlp_jax.cli import common
from vlp_jax.data.storage import records
# ConvertError is the command's request error (exit 2), as cli.<command>.<Command>Error is for every command.
from vlp_jax.data.ingest.input_format import INPUT_FORMATS, ConvertError  # pylint: disable=unused-import  # noqa: F401
from vlp_jax.data.ingest.converter import convert
from vlp_jax.data.ingest.webdataset import DEFAULT_CAPTION_KEY, DEFAULT_IMAGE_KEYS


# The flags that are keyword arguments of `convert` (besides --format, --input and --output).
OPTION_FLAGS = ('image_column', 'caption_column', 'image_keys', 'caption_key', 'jsonl', 'long_captions', 'source',
                'max_side', 'max_pixels', 'prefix', 'examples_per_shard', 'num_workers', 'overwrite')


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags (--format, --input and --output required)."""
  def string(name, default, help_string):
    flags.DEFINE_string(name, default, help_string, flag_values=flag_values)

  def integer(name, default, help_string):
    flags.DEFINE_integer(name, default, help_string, flag_values=flag_values)

  string('format', None, f'Input layout: {", ".join(INPUT_FORMATS)}.')
  string('input', None, 'A file, a folder or a glob (for folder: the folder of images).')
  string('output', None, 'The folder to write the shards and the manifest into.')
  string('image_column', None, "Image path column (tsv/csv: 'filepath'; folder JSONL: 'file_name').")
  string('caption_column', None, "Caption column (default 'caption').")
  string('image_keys', DEFAULT_IMAGE_KEYS, 'webdataset: image extensions, comma-separated as in '
         'config.data.webdataset.image_keys; the first present wins.')
  string('caption_key', DEFAULT_CAPTION_KEY, 'webdataset: the caption extension.')
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
