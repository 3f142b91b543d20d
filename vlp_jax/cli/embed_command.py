"""Embeddings from any checkpoint (trained or imported):

  python -m vlp_jax.embed --checkpoint=CKPT [--pixels=IMAGES] [--texts=T.txt] --output=OUT.npz
  python -m vlp_jax.embed --checkpoint=CKPT --dataset=synthetic --split=train --output=OUT.npz

The first form embeds images and captions (one per line, tokenised by the model's tokenizer) into
`image_embeddings` and `text_embeddings`, float32 and L2-normalised. --pixels takes image files, preprocessed as the
evaluation preprocesses them (RGB, bicubic resize of the shorter side, centre crop, CLIP mean and std): a folder (its
.jpg/.jpeg/.png/.webp/.bmp/.gif/.tif files, by name), a glob pattern ('photos/*.jpg', by name), a .txt list (one
path a line, relative to the list's folder) or one image; their order is written as `image_files`. A .npy file is
taken as float32 pixels [N, H, W, 3] already preprocessed. The second form streams
a whole split of the checkpoint's dataset (or `--data_path` shards) and also writes `keys` (the example ids), e.g. to
pre-extract SaCo's pseudo-affinity teacher embeddings. Exit codes as for every command (cli/common.py): 2 for a bad
request or a missing input.
"""
from __future__ import annotations

import glob
import os

import grain
import numpy as np
from absl import flags, logging

from vlp_jax import errors
from vlp_jax.checkpoint_files import resolve_checkpoint
from vlp_jax.cli import common
from vlp_jax.data import formats
from vlp_jax.data.image import image_ops
from vlp_jax.data.storage import records
from vlp_jax.evalsets.streamed import StreamedImages
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.inference import encoder_for_checkpoint, pixel_size_problem, preprocess_image

# The image files a folder or a glob pattern given to --pixels contributes (lower-cased suffixes).
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.webp', '.bmp', '.gif', '.tif', '.tiff')


class EmbedError(errors.ConfigError):
  """A bad request (what to embed, the --output, the --pixels array); the message names the flag. Exit code 2."""


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags (--checkpoint and --output required)."""
  flags.DEFINE_string('checkpoint', None, 'Checkpoint step dir, imported checkpoint, or workdir (its latest step).',
                      flag_values=flag_values)
  flags.DEFINE_string('pixels', None, 'Images: a folder, a glob pattern, a .txt list of paths or one image file '
                      '(preprocessed as the evaluation does), or a .npy of preprocessed float32 images [N, H, W, 3].',
                      flag_values=flag_values)
  flags.DEFINE_string('texts', None, 'Text file with one caption per line.', flag_values=flag_values)
  flags.DEFINE_string('dataset', None, "Embed a dataset split instead: 'synthetic' or 'array_record'.",
                      flag_values=flag_values)
  flags.DEFINE_string('split', 'train', 'Split of --dataset.', flag_values=flag_values)
  flags.DEFINE_string('data_path', None, 'ArrayRecord shards for --dataset=array_record.', flag_values=flag_values)
  flags.DEFINE_string('output', None, 'The .npz file to write.', flag_values=flag_values)
  flags.DEFINE_integer('batch_size', 256, 'Examples per forward pass.', lower_bound=1, flag_values=flag_values)
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --output.', flag_values=flag_values)
  flags.mark_flags_as_required(['checkpoint', 'output'], flag_values=flag_values)


def load_pixels(path: str) -> np.ndarray:
  """[N, H, W, 3] float32 from .npy, with errors that say what is wrong."""
  if not os.path.isfile(path):
    raise errors.DataNotFoundError(f'--pixels {path} does not exist')
  try:
    pixels = np.load(path, allow_pickle=False)
  except (OSError, ValueError) as error:  # not a .npy file, or one holding Python objects
    raise EmbedError(f'--pixels {path} is not a readable .npy array: {error}') from None
  if pixels.ndim != 4 or pixels.shape[-1] != 3:
    raise EmbedError(f'--pixels {path} has shape {pixels.shape}; expected [N, H, W, 3] (channels last)')
  if pixels.dtype != np.float32:
    raise EmbedError(f'--pixels {path} has dtype {pixels.dtype}; a .npy must hold float32 images already '
                     'preprocessed (vlp_jax.inference.preprocess_image); pass image files (a folder, a glob or a '
                     '.txt list) to have them preprocessed')
  return pixels


def image_files(spec: str) -> list[str]:
  """The image files --pixels names, in order: a folder's image files (IMAGE_SUFFIXES) by name, a glob pattern's
  matches by name, the paths a .txt file lists (one a line, relative to its folder; blank lines skipped), or one
  image file."""
  if os.path.isdir(spec):
    paths = sorted(os.path.join(spec, name) for name in os.listdir(spec) if name.lower().endswith(IMAGE_SUFFIXES))
    if not paths:
      raise EmbedError(f'--pixels {spec} is a folder without image files ({", ".join(IMAGE_SUFFIXES)})')
    return paths
  if glob.has_magic(spec):
    paths = sorted(path for path in glob.glob(spec) if os.path.isfile(path))
    if not paths:
      raise errors.DataNotFoundError(f'--pixels {spec} matches no file')
    return paths
  if not os.path.isfile(spec):
    raise errors.DataNotFoundError(f'--pixels {spec} does not exist')
  if not spec.lower().endswith('.txt'):
    return [spec]
  with open(spec, encoding='utf-8') as f:
    listed = [line.strip() for line in f if line.strip()]
  paths = [os.path.join(os.path.dirname(spec), path) for path in listed]  # absolute paths are kept by join
  missing = [path for path in paths if not os.path.isfile(path)]
  if missing:
    raise errors.DataNotFoundError(f'--pixels {spec} lists {len(missing)} files that do not exist, e.g. {missing[0]}')
  if not paths:
    raise EmbedError(f'--pixels {spec} lists no image files')
  return paths


def preprocessed_images(paths: list[str], image_size: int,
                        preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING
                        ) -> StreamedImages:
  """The image files as [N, image_size, image_size, 3] float32 model input, decoded chunk by chunk as they are
  embedded: decoded to RGB (`records.decode_image`), then `inference.preprocess_image` with the model's
  `preprocessing`, the evaluation's steps."""
  def load(index: int) -> np.ndarray:
    with open(paths[index], 'rb') as f:
      data = f.read()
    try:
      return preprocess_image(records.decode_image(data), image_size, preprocessing)
    except records.BadRecordError as error:
      raise EmbedError(f'--pixels: {paths[index]} is not a readable image ({error})') from None
  return StreamedImages(load, len(paths), image_size)


def load_texts(path: str) -> list[str]:
  if not os.path.isfile(path):
    raise errors.DataNotFoundError(f'--texts {path} does not exist')
  with open(path, encoding='utf-8') as f:
    return [line.rstrip('\n') for line in f]


def embed_split(encoder: Encoder, paths: list[str], image_size: int, batch_size: int,
                preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING
                ) -> dict[str, np.ndarray]:
  """Stream every record of `paths` (in order) through the encoder: keys, image and caption embeddings, the images
  preprocessed by the model's `preprocessing`."""
  source = grain.sources.ArrayRecordDataSource(paths)
  keys, image_emb, text_emb = [], [], []
  for start in range(0, len(source), batch_size):
    examples = [records.deserialize(source[i]) for i in range(start, min(start + batch_size, len(source)))]
    images = np.stack([preprocessing(records.decode_image(e['image']), image_size) for e in examples])
    keys += [e['key'] for e in examples]
    image_emb.append(encoder.images(images))
    text_emb.append(encoder.texts([e['caption'] for e in examples]))
    done = start + len(examples)
    if done == len(source) or (start // batch_size) % 20 == 0:
      print(f'embedded {done}/{len(source)}', flush=True)
  return {'keys': np.array(keys), 'image_embeddings': np.concatenate(image_emb),
          'text_embeddings': np.concatenate(text_emb)}


def write_npz(path: str, arrays: dict[str, np.ndarray], overwrite: bool) -> None:
  """Written to a temporary file and renamed, so an existing file is replaced only by a complete one."""
  if os.path.exists(path) and not overwrite:
    raise EmbedError(f'{path} exists; pass --overwrite to replace it')
  tmp = f'{path}.tmp.npz'
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def run(checkpoint: str, output: str, pixels: str | None = None, texts: str | None = None,
        dataset: str | None = None, split: str = 'train', data_path: str | None = None, batch_size: int = 256,
        overwrite: bool = False) -> dict[str, np.ndarray]:
  """The command: check the request, embed, write `output` (replaced only by a complete file) and return the arrays."""
  if not (pixels or texts or dataset):
    raise EmbedError('nothing to embed: pass --pixels and/or --texts, or --dataset')
  if dataset and (pixels or texts):
    raise EmbedError('--dataset embeds a whole split; do not combine it with --pixels / --texts')
  if not output.endswith('.npz'):
    raise EmbedError(f'--output {output} must end in .npz')
  if os.path.exists(output) and not overwrite:
    raise EmbedError(f'{output} exists; pass --overwrite to replace it')
  from_files = bool(pixels) and not pixels.lower().endswith('.npy')
  image_paths = image_files(pixels) if from_files else []  # before the checkpoint loads: a wrong path fails at once
  config, encoder = encoder_for_checkpoint(resolve_checkpoint(checkpoint), batch_size)  # as vlp_jax.load
  if dataset:
    data = config.data
    data.name = dataset
    if data_path:
      data.path = data_path
    try:
      paths = formats.split_paths(data, split)
    except ValueError as error:  # an unknown dataset or split (missing data raises DataNotFoundError)
      raise EmbedError(f'--dataset={dataset} --split={split}: {error}') from None
    arrays = embed_split(encoder, paths, config.model.vision.image_size, batch_size,
                         image_ops.preprocessing_of(config.model))
  else:
    arrays = {}
    if from_files:
      arrays['image_embeddings'] = encoder.images(preprocessed_images(image_paths, config.model.vision.image_size,
                                                                      image_ops.preprocessing_of(config.model)))
      arrays['image_files'] = np.array(image_paths)
    elif pixels:
      images = load_pixels(pixels)
      if problem := pixel_size_problem(images.shape[1], images.shape[2], config.model.vision):
        raise EmbedError(f'--pixels {problem}')
      arrays['image_embeddings'] = encoder.images(images)
    if texts:
      arrays['text_embeddings'] = encoder.texts(load_texts(texts))
  write_npz(output, arrays, overwrite)
  return arrays


def command(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Embed with the parsed flags and print what was written; raises the user-facing errors of vlp_jax/errors.py."""
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  f = flag_values
  arrays = run(f.checkpoint, f.output, f.pixels, f.texts, f.dataset, f.split, f.data_path, f.batch_size, f.overwrite)
  shapes = ', '.join(f'{k} {v.shape}' for k, v in arrays.items())
  print(f'Wrote {f.output}: {shapes}')


def run_command() -> None:
  """The command line: `python -m vlp_jax.embed`."""
  common.run(command, define_flags)


if __name__ == '__main__':
  run_command()
