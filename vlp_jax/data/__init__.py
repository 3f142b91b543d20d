"""The data of training and evaluation, by job (docs/data.md):

  storage/  what one example is on disk and how shards hold it: the record schema, the ArrayRecord shard reader and
            writer, the record fields an objective needs
  sources/  where examples come from besides our shards: webdataset tars read in place, prepared tfds splits (and the
            readable class names of their datasets), the embedded dataset of rendered shape scenes
  loading/  the grain pipeline that turns shards into training batches: order, source mixing, the record counters,
            the teacher table, the host memory it holds
  formats/  the training data formats by name (config.data.name), each one file of a registry
  text/     the tokenizers (CLIP's BPE, SigLIP's and SigLIP 2's SentencePiece) and what the views make of captions:
            ZeroVL's augmentation, COSMOS's crops, LocCa's decoder tasks
  image/    image preprocessing and augmentation, host and device side, NaFlex patches and staged resolutions
  ingest/   the converter library behind `python -m vlp_jax.convert`

Imports flow one way: storage and image import no other part of data; text and sources import those two; loading
imports storage and sources; formats and ingest sit on top.
"""
