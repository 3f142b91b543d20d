"""Helpers shared by the benchmark scripts."""
from __future__ import annotations

import io
import os
import statistics
import tempfile

import numpy as np
from PIL import Image
import sentencepiece


def compiled_memory(compiled) -> dict[str, int]:
  """Per-device memory of a compiled XLA program from its memory analysis.

  peak_bytes = arguments + outputs not aliased to (donated) arguments + temporaries. XLA's own
  `peak_memory_in_bytes` leaves the temporaries out on CPU, and they are exactly what activations, logit matrices
  and accumulation change.
  """
  m = compiled.memory_analysis()
  args, out, alias, temp = (int(m.argument_size_in_bytes), int(m.output_size_in_bytes), int(m.alias_size_in_bytes),
                            int(m.temp_size_in_bytes))
  return {'peak_bytes': args + out - alias + temp, 'argument_bytes': args, 'temp_bytes': temp}


PRECISIONS = {'fp32': 'float32', 'bf16': 'bfloat16'}


def alternating_order(items, round_index: int) -> list:
  """`items` in the order of round `round_index`: as given in even rounds, reversed in odd ones (A B, B A, ...), so
  that the machine's drift hits every item alike."""
  return list(items) if round_index % 2 == 0 else list(items)[::-1]


def ratio_range(ratios: list[float]) -> dict[str, float]:
  """The per-round ratios of two variants summarised: {'median', 'min', 'max'}, to 3 decimals."""
  return {'median': round(statistics.median(ratios), 3), 'min': round(min(ratios), 3), 'max': round(max(ratios), 3)}


def build_config(model: str, batch_size: int, objective: str, precision: str, remat: bool, patch_dropout: float = 0.0,
                 scan_layers: bool = False, attention: str = 'auto'):
  import ml_collections
  from vlp_jax import models, objectives
  from vlp_jax.config import base_config, validate, with_term
  config = base_config()
  config.batch_size = batch_size
  config.model = models.preset(model)
  if precision not in PRECISIONS:
    raise ValueError(f"--precision has '{precision}'; valid choices: {list(PRECISIONS)}")
  config.model.dtype = PRECISIONS[precision]
  config.model.remat = remat
  config.model.scan_layers = scan_layers
  config.model.attention = attention  # the attention route (models/transformer.py)
  if config.model.text.tokenizer == 'sentencepiece' and not config.model.text.tokenizer_path:
    # SigLIP presets read the spiece.model that comes with their weights; a benchmark has none, and the step's cost
    # does not depend on which ids the captions become
    config.model.text.tokenizer_path = caption_spiece_model()
  if patch_dropout:
    config.model.vision.patch_dropout = patch_dropout
  if objective in objectives.TERMS:
    config = with_term(config, objective)
  else:
    config.objective = ml_collections.ConfigDict({'name': objective, 'terms': ()})
  if objective == 'cosmos':  # local crops keep COSMOS's 96 / 224 ratio at other image sizes (a patch multiple)
    v = config.model.vision
    config.objective.local_crop_size = max(v.patch_size, round(v.image_size * 96 / 224 / v.patch_size) * v.patch_size)
  validate(config, num_devices=1)
  return config


def real_batch(config, batch_size: int) -> dict:
  """The objective's views of a few embedded-dataset examples at the model's image size, tiled to `batch_size`."""
  import numpy as np
  from vlp_jax import objectives
  from vlp_jax.data.loading import pipeline
  from vlp_jax.data.sources import synthetic_shapes as synthetic
  from vlp_jax.data.storage import records
  views = objectives.OBJECTIVES.get(config.objective.name).views(config)
  size = config.model.vision.image_size
  rng = np.random.default_rng(0)
  examples = [views.random_map(pipeline.DecodeRecord().map(records.serialize(
      synthetic.make_example(0, 'train', synthetic.SOURCES[i % 3], i, size))), rng) for i in range(8)]
  return {k: np.stack([examples[i % len(examples)][k] for i in range(batch_size)]) for k in examples[0]}


def with_model_shapes(config, path: str):
  """`config` with the embedding and tower sizes of the config file at `path`; precision, remat, scan and patch
  dropout stay as `config` sets them."""
  from vlp_jax.config import from_file, validate
  shapes = from_file(path).model
  config.model.embed_dim = shapes.embed_dim
  for key in ('image_size', 'patch_size', 'width', 'layers', 'heads'):
    config.model.vision[key] = shapes.vision[key]
  for key in ('context_length', 'width', 'layers', 'heads'):
    config.model.text[key] = shapes.text[key]
  if 'local_crop_size' in config.objective:  # COSMOS's local crops follow the image size (as build_config sets them)
    v = config.model.vision
    config.objective.local_crop_size = max(v.patch_size, round(v.image_size * 96 / 224 / v.patch_size) * v.patch_size)
  validate(config, num_devices=1)
  return config


def caption_spiece_model(directory: str = os.path.join(tempfile.gettempdir(), 'vlp_jax_bench_spiece'),
                         vocab_size: int = 64) -> str:
  """A SentencePiece model with SigLIP's special ids ('</s>' 1, '<unk>' 2) trained on the embedded dataset's
  captions (reused when present): the tokenizer of a SigLIP preset benchmarked without its weights."""
  from vlp_jax.data.sources import synthetic_shapes as synthetic
  path = os.path.join(directory, f'captions-{vocab_size}.model')
  if os.path.exists(path):
    return path
  os.makedirs(directory, exist_ok=True)
  captions = [synthetic.make_example(0, 'train', synthetic.SOURCES[i % 3], i, 16)['caption'] for i in range(3000)]
  prefix = os.path.join(directory, f'captions-{vocab_size}-{os.getpid()}')
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(captions), model_prefix=prefix, vocab_size=vocab_size, model_type='unigram',
      pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2)
  os.replace(prefix + '.model', path)  # whole or not at all, whoever else is writing it
  return path


def photo_jpeg(photos: list[np.ndarray], index: int, rng: np.random.Generator, side: int) -> bytes:
  """A natural-photo JPEG ([side, side], quality 90): a random square crop (random scale) of one of `photos` (the
  index-th, cyclically), resized, flipped half the time. Decoding it costs what a real photo costs."""
  photo = photos[index % len(photos)]
  crop = int(rng.integers(side // 2, min(photo.shape[:2]) + 1))
  top, left = rng.integers(0, photo.shape[0] - crop + 1), rng.integers(0, photo.shape[1] - crop + 1)
  image = Image.fromarray(photo[top:top + crop, left:left + crop]).resize((side, side), Image.Resampling.BICUBIC)
  if rng.random() < 0.5:
    image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
  buffer = io.BytesIO()
  image.save(buffer, format='JPEG', quality=90)
  return buffer.getvalue()
