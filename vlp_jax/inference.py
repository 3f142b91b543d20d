"""`vlp_jax.load(checkpoint)`: a checkpoint as a model ready to embed images and captions, with the eval pipeline's
preprocessing and the model's tokenizer (what open_clip's `create_model_and_transforms` and `get_tokenizer` give):

    import vlp_jax
    clip = vlp_jax.load('/tmp/run')       # a workdir (its latest step), a step directory or an imported checkpoint
    image_emb = clip.encode_image(PIL.Image.open('cat.jpg'))          # [1, d] float32, L2-normalised
    text_emb = clip.encode_text(['a photo of a cat', 'a photo of a dog'])   # [2, d]
    probs = softmax(100 * image_emb @ text_emb.T)

The embeddings come from the same `Encoder`, built the same way (`encoder_for_checkpoint`), as those of
`python -m vlp_jax.embed` and the training evaluation.
"""
from __future__ import annotations

from typing import Any, Sequence

import ml_collections
import numpy as np
from PIL import Image

from vlp_jax import models, parallel
from vlp_jax.models.towers import vision_tower
from vlp_jax.data.image import image_ops
from vlp_jax.data.storage import records
from vlp_jax.data.image.naflex_patches import naflex_patches
from vlp_jax.data.text.tokenizer_factory import tokenizer_for
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.models.naflex_inputs import NaflexImages
from vlp_jax.objectives.base import tower_variables
from vlp_jax.training.checkpoint import load_config
from vlp_jax.checkpoint_files import load_variables, resolve_checkpoint

DEFAULT_BATCH_SIZE = 256  # python -m vlp_jax.embed's --batch_size default


def encoder_for_checkpoint(checkpoint_dir: str, batch_size: int = DEFAULT_BATCH_SIZE, ema: bool = False
                           ) -> tuple[ml_collections.ConfigDict, Encoder]:
  """(the saved config, an Encoder of the two towers replicated over every device) for a resolved checkpoint step
  directory (`training.checkpoint.resolve_checkpoint`). Objective heads (SimCLR, COSMOS, an EMA teacher) stay out.
  With `ema`, the towers take the checkpoint's EMA of the weights (config.ema.decay) instead of its parameters."""
  config = load_config(checkpoint_dir)
  params, model_state = load_variables(checkpoint_dir, ema=ema)
  model = models.build_model(config.model)
  mesh = parallel.make_mesh()
  variables = parallel.replicated_from_host(tower_variables(params, model_state), mesh)
  return config, Encoder(model, variables, mesh, batch_size, config.model.text.context_length)


def image_stride(vision: ml_collections.ConfigDict) -> int:
  """Image sides must be multiples of this: the patch size of a ViT tower, 32 (its total downsampling) for a
  ResNet."""
  return vision.patch_size if vision_tower(vision).patch_based else 32


def pixel_size_problem(height: int, width: int, vision: ml_collections.ConfigDict) -> str | None:
  """Why [height, width] images do not fit the image tower `vision` (config.model.vision), or None if they do."""
  stride = image_stride(vision)
  if height % stride or width % stride:
    return (f'images are {height}x{width}; this model needs sides that are multiples of {stride} (it was trained at '
            f'{vision.image_size})')
  return None


def preprocess_image(image: Any, image_size: int,
                     preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING) -> np.ndarray:
  """A PIL image (any mode) or an [H, W, 3] uint8 array -> [image_size, image_size, 3] float32: the eval pipeline's
  steps (`records.to_rgb`, then the model family's `preprocessing`, config.model.preprocess: by default a bicubic
  resize of the shorter side, a centre crop and OpenAI CLIP's mean and std; SigLIP's square resize to [-1, 1])."""
  if isinstance(image, Image.Image):
    return preprocessing(records.to_rgb(image), image_size)
  if not (isinstance(image, np.ndarray) and image.dtype == np.uint8):
    raise TypeError(f'preprocess takes a PIL image or an [H, W, 3] uint8 array, got {_describe(image)}; float arrays '
                    'are taken as already preprocessed (pass them to encode_image directly)')
  if image.ndim != 3 or image.shape[-1] != 3:
    raise ValueError(f'got a uint8 image of shape {image.shape}; expected [H, W, 3] (RGB, channels last)')
  return preprocessing(image, image_size)


def image_list(images: Any) -> list:
  """What `LoadedModel.encode_image` takes -> a list of single images (PIL images or [H, W, 3] arrays)."""
  if isinstance(images, Image.Image):
    return [images]
  if isinstance(images, np.ndarray):
    if images.ndim in (3, 4) and images.shape[-1] == 3:
      return list(images) if images.ndim == 4 else [images]
    raise ValueError(f'encode_image got an array of shape {images.shape}; expected [N, H, W, 3] or [H, W, 3] '
                     '(channels last)')
  if isinstance(images, (list, tuple)):
    return list(images)
  raise TypeError(f'encode_image takes a PIL image, an array or a list of them, got {_describe(images)}')


def _describe(value: Any) -> str:
  if isinstance(value, np.ndarray):
    return f'an array of shape {value.shape} and dtype {value.dtype}'
  return f'a {type(value).__name__}'


def _next_power_of_two(n: int) -> int:
  return 1 << max(n - 1, 0).bit_length()


class LoadedModel:
  """A checkpoint's two towers with their preprocessing and tokenizer; see `load`.

  Attributes: checkpoint (the step directory read), config (the config saved with it), model (the flax module),
  variables (the towers' variables on the devices), encoder (the `Encoder` of batch_size rows, which also takes
  streamed eval sets, `data.streamed.StreamedImages`), image_size, preprocessing (the model family's,
  `image_ops.ImagePreprocessing`), context_length, embed_dim.
  """

  def __init__(self, checkpoint: str, config: ml_collections.ConfigDict, encoder: Encoder, batch_size: int):
    self.checkpoint, self.config = checkpoint, config
    self.batch_size = batch_size
    self.encoder = encoder
    self._encoders = {batch_size: encoder}  # by chunk size (see _encoder_for)
    self.model = models.build_model(config.model)
    self.image_size = config.model.vision.image_size
    self.preprocessing = image_ops.preprocessing_of(config.model)  # the family's, saved with the checkpoint
    self.context_length = config.model.text.context_length
    self.embed_dim = config.model.embed_dim

  @property
  def variables(self) -> dict:
    return self.encoder.variables

  def __repr__(self) -> str:
    return f'LoadedModel({self.config.model.name}, image_size={self.image_size}, checkpoint={self.checkpoint!r})'

  def preprocess(self, image: Any) -> np.ndarray:
    """A PIL image or [H, W, 3] uint8 -> [S, S, 3] float32 model input, S = image_size, by the model's
    `preprocessing` (see `preprocess_image`)."""
    return preprocess_image(image, self.image_size, self.preprocessing)

  def tokenize(self, texts: str | Sequence[str]) -> np.ndarray:
    """A string or strings -> [N, context_length] int32 tokens ([1, context_length] for one string), by the
    tokenizer the model's config names (CLIP's BPE, or the SentencePiece file of SigLIP weights)."""
    return tokenizer_for(self.config.model.text)(texts, context_length=self.context_length)

  def _encoder_for(self, rows: int) -> Encoder:
    """An Encoder whose chunk is the next power of two >= rows, at most batch_size: a few images are not run through
    a whole padded batch. The Encoders share the variables; each chunk size compiles once."""
    size = min(self.batch_size, _next_power_of_two(rows))
    if size not in self._encoders:
      self._encoders[size] = Encoder(self.model, self.encoder.variables, self.encoder.mesh, size,
                                     self.context_length)
    return self._encoders[size]

  def pixels(self, images: Any) -> np.ndarray:
    """What `encode_image` takes -> the model input [N, H, W, 3] float32."""
    batch = [np.asarray(item, np.float32) if isinstance(item, np.ndarray) and np.issubdtype(item.dtype, np.floating)
             else self.preprocess(item)  # float arrays are already normalised, as embed --pixels takes them
             for item in image_list(images)]
    if not batch:
      return np.zeros((0, self.image_size, self.image_size, 3), np.float32)
    shapes = sorted({x.shape for x in batch})
    if len(shapes) > 1:
      raise ValueError(f'float images of different shapes {shapes} cannot be batched; pass PIL or uint8 images to '
                       'have them resized, or preprocess them to one size')
    if len(shapes[0]) != 3 or shapes[0][-1] != 3:
      raise ValueError(f'images of shape {shapes[0]}; expected [H, W, 3] (channels last)')
    if problem := pixel_size_problem(shapes[0][0], shapes[0][1], self.config.model.vision):
      raise ValueError(problem)
    return np.stack(batch)

  @property
  def naflex(self) -> bool:
    """Whether the model's own preprocessing is NaFlex (config.model.vision.naflex: SigLIP 2's NaFlex models)."""
    return bool(self.config.model.vision.get('naflex', False))

  def naflex_images(self, images: Any, max_patches: int | None = None) -> NaflexImages:
    """What `encode_image` takes (PIL images or uint8 arrays, of any sizes) -> NaflexImages on the host: each image
    resized to the patch grid that keeps its aspect ratio within `max_patches` patches (default: the model's
    config.model.vision.max_patches), normalised by the model's preprocessing (data/image/naflex_patches.py)."""
    vision = self.config.model.vision
    if vision.type != 'siglip_vit':
      raise ValueError(f"NaFlex images need a config.model.vision.type='siglip_vit' tower; this model's is "
                       f'{vision.type!r}')
    budget = vision.get('max_patches', 256) if max_patches is None else max_patches
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
      raise ValueError(f'max_patches={budget!r} must be a positive integer (the patch budget per image)')
    items = image_list(images)
    if not all(isinstance(x, Image.Image) or (isinstance(x, np.ndarray) and x.dtype == np.uint8) for x in items):
      raise TypeError('NaFlex encode_image takes PIL images or [H, W, 3] uint8 arrays (raw pixels of any size), got '
                      f'{[_describe(x) for x in items][:3]}; pass NaflexImages to give preprocessed patches')
    rgb = [records.to_rgb(x) if isinstance(x, Image.Image) else x for x in items]
    pairs = [naflex_patches(x, vision.patch_size, budget, self.preprocessing) for x in rgb]
    width = vision.patch_size ** 2 * 3
    return NaflexImages(np.stack([p for p, _ in pairs]) if pairs else np.zeros((0, budget, width), np.float32),
                        np.stack([s for _, s in pairs]) if pairs else np.zeros((0, 2), np.int32))

  def encode_image(self, images: Any, max_patches: int | None = None) -> np.ndarray:
    """Images -> [N, d] float32 L2-normalised embeddings ([1, d] for one image).

    images: a PIL image, a uint8 array [H, W, 3] or [N, H, W, 3] (raw RGB pixels), or a list of them: resized,
    centre-cropped and normalised as the eval pipeline does (`preprocess`); or float arrays, taken as already
    normalised model input (what `preprocess` returns, what `python -m vlp_jax.embed --pixels` takes).

    NaFlex (a model with config.model.vision.naflex, or any SigLIP model when `max_patches` is given): PIL images
    or uint8 arrays of any sizes and aspect ratios in one call, each resized to at most `max_patches` patches
    keeping its aspect ratio (`naflex_images`); or NaflexImages, taken as they are.
    """
    if isinstance(images, NaflexImages) or self.naflex or max_patches is not None:
      if not isinstance(images, NaflexImages):
        images = self.naflex_images(images, max_patches)
      if not len(images.patches):
        return np.zeros((0, self.embed_dim), np.float32)
      return self._encoder_for(len(images.patches)).naflex_images(images)
    pixels = self.pixels(images)
    if not len(pixels):
      return np.zeros((0, self.embed_dim), np.float32)
    return self._encoder_for(len(pixels)).images(pixels)

  def encode_text(self, texts: str | Sequence[str]) -> np.ndarray:
    """A caption or captions -> [N, d] float32 L2-normalised embeddings ([1, d] for one string), tokenised with
    `tokenize`."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not all(isinstance(t, str) for t in texts):
      raise TypeError(f'encode_text takes a string or a list of strings, got {[type(t).__name__ for t in texts][:5]}')
    if not texts:
      return np.zeros((0, self.embed_dim), np.float32)
    return np.array(self._encoder_for(len(texts)).texts(texts))  # writable: the encoder memo is read-only

  def encode_tokens(self, tokens: Any) -> np.ndarray:
    """[N, context_length] integer tokens (what `tokenize` gives; any integer array-like) -> [N, d] float32
    L2-normalised embeddings, equal to `encode_text` of the captions they tokenise."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] != self.context_length or not (
        np.issubdtype(tokens.dtype, np.integer) or tokens.size == 0):
      raise ValueError(f'encode_tokens takes [N, {self.context_length}] integer tokens (what tokenize gives), got '
                       f'{_describe(tokens)}')
    if not len(tokens):
      return np.zeros((0, self.embed_dim), np.float32)
    return self._encoder_for(len(tokens)).tokens(tokens)


def load(checkpoint: str, batch_size: int = DEFAULT_BATCH_SIZE, ema: bool = False) -> LoadedModel:
  """A checkpoint (a workdir, its `checkpoints/<step>` directory, or one written by `python -m vlp_jax.weights
  import`) -> LoadedModel with encode_image, encode_text, encode_tokens, preprocess and tokenize. Inputs of more
  than `batch_size` rows are embedded in chunks of that size. `ema`: the EMA of the weights that a run with
  config.ema.decay > 0 keeps, instead of its parameters.

  Raises FileNotFoundError naming the path when it holds no checkpoint, and a ValueError (`errors.ConfigError`)
  with `ema` when it holds no EMA.
  """
  if batch_size < 1:
    raise ValueError(f'batch_size={batch_size} must be >= 1')
  checkpoint_dir = resolve_checkpoint(str(checkpoint))
  config, encoder = encoder_for_checkpoint(checkpoint_dir, batch_size, ema)
  return LoadedModel(checkpoint_dir, config, encoder, batch_size)

