"""Converting image-text data into ArrayRecord shards of the record schema: the library behind
`python -m vlp_jax.convert` (cli/convert_command.py, a thin shell over `converter.convert`).

  input_format.py   the format table INPUT_FORMATS (--format), the InputFormat interface, Entry, Options, ConvertError
  table.py          formats 'tsv' and 'csv'
  webdataset.py     format 'webdataset' (uncompressed tars, read with the tar helpers of
                    data/sources/webdataset_tars.py)
  folder.py         format 'folder' (images + metadata.jsonl)
  images.py         prepare_image: the image bytes a record stores
  long_captions.py  --long_captions: loading the table and matching it to examples
  manifest.py       the output folder and convert_manifest.json (idempotent and resumable runs)
  converter.py      the conversion: entries -> records (worker processes) -> shards (data/storage/shard_writer.py)

A new input format is one module here that registers an InputFormat subclass (docs/extending.md).
"""
# The built-in formats, imported first so that INPUT_FORMATS lists them in this order (its discovery adds any other
# format module of this package after them).
from vlp_jax.data.ingest import table, webdataset, folder  # pylint: disable=unused-import  # noqa: F401
