"""The `encode` functions every evaluator uses: images or captions -> L2-normalised embeddings on the host."""
from __future__ import annotations

import sys
import time
from typing import Callable, Sequence, TextIO

import jax
import numpy as np
from jax.sharding import Mesh

from vlp_jax import parallel
from vlp_jax.data.text.tokenizer_factory import tokenizer_for
from vlp_jax.losses.contrastive import l2_normalize
from vlp_jax.models.naflex_inputs import NaflexImages
from vlp_jax.models.towers import patch_based_towers, vision_tower


# Embedding runs of at least this many chunks print their progress.
PROGRESS_MIN_CHUNKS = 20


class EmbeddingProgress:
  """The progress of one embedding run as one line: on a terminal it is rewritten in place (carriage return) at
  every update; anywhere else (a log file, a pipe) only the final line is written, so that a log holds one line per
  run rather than one per tenth of it."""

  def __init__(self, total: int, what: str, stream: TextIO | None = None):
    self.total, self.what = total, what
    self.stream = stream or sys.stdout
    self.in_place = self.stream.isatty()
    self.began = time.perf_counter()

  def update(self, done: int) -> None:
    if not self.in_place:
      return
    seconds = max(time.perf_counter() - self.began, 1e-9)
    eta = (self.total - done) * seconds / max(done, 1)
    # \x1b[K clears what a longer earlier line left to the right.
    self.stream.write(f'\r  embedding {self.what}: {done}/{self.total} ({done / seconds:.0f}/s, ETA {eta:.0f}s)'
                      '\x1b[K')
    self.stream.flush()

  def finish(self) -> None:
    seconds = max(time.perf_counter() - self.began, 1e-9)
    line = f'  embedded {self.total} {self.what} in {seconds:.1f}s ({self.total / seconds:.0f}/s)'
    self.stream.write(('\r' + line + '\x1b[K' if self.in_place else line) + '\n')
    self.stream.flush()


def project_patch_tokens(model, variables: dict, images: jax.Array) -> jax.Array:
  """images [B, H, W, 3] -> [B, P, d] unit-norm patch embeddings in the joint space (ViT towers only).

  The model's patch `tokens` are already through `ln_post`; `proj` maps them as it maps the class token. A SigLIP
  tower has no `proj`: its tokens already have the joint space's width and are used as they are. Traceable: meant
  to be jitted (the Encoder's `patch_embeddings`).
  """
  if not vision_tower(model.vision).patch_based:
    raise ValueError(f"patch embeddings need a patch-based image tower ({', '.join(patch_based_towers())}), not "
                     f"model.vision.type='{model.vision.type}'")
  tokens = model.apply(variables, images, method=model.encode_image)['tokens']
  proj = variables['params']['visual'].get('proj')
  return l2_normalize(tokens if proj is None else tokens @ proj.astype(tokens.dtype))


class Encoder:
  """Embeds in fixed-size chunks over the mesh (rows sharded over every device), returning numpy float32.

  `variables` is what `objectives.base.tower_variables` gives, sharded or replicated; every process must pass the
  same inputs. Captions are tokenised by the tokenizer the model's text config names (`tokenizer.tokenizer_for`).
  """

  def __init__(self, model, variables: dict, mesh: Mesh, batch_size: int = 256,
               context_length: int | None = None):
    shards = parallel.num_batch_shards(mesh)
    self.batch_size = max(shards, batch_size // shards * shards)
    self.mesh = mesh
    self._text_memo: dict[tuple[str, ...], np.ndarray] = {}
    self.variables = variables
    self.context_length = context_length or model.text.context_length
    self.tokenizer = tokenizer_for(model.text)  # read here, so that a missing tokenizer file fails before compiling
    out = parallel.replicated(mesh)
    self._images = jax.jit(
        lambda v, x: l2_normalize(model.apply(v, x, method=model.encode_image)['embed']),
        out_shardings=out)
    self._texts = jax.jit(
        lambda v, t: l2_normalize(model.apply(v, t, method=model.encode_text)['embed']),
        out_shardings=out)
    self._features = jax.jit(lambda v, x: model.apply(v, x, method=model.encode_image)['cls'], out_shardings=out)
    # Patch tokens live in the joint space only for ViT towers (`project_patch_tokens`).
    self.has_patch_embeddings = vision_tower(model.vision).patch_based
    self._patches = jax.jit(lambda v, x: project_patch_tokens(model, v, x), out_shardings=out)
    self._tokens = jax.jit(lambda v, x: model.apply(v, x, method=model.encode_image)['tokens'], out_shardings=out)
    self.model = model  # for evaluators that run a head of the objective's (evaluation/referring.py)

  # The last few caption lists embedded with the current variables: retrieval and affinity consistency read the same
  # captions of a set, and the memo embeds them once.
  TEXT_MEMO_SIZE = 2

  @property
  def variables(self) -> dict:
    return self._variables

  @variables.setter
  def variables(self, variables: dict) -> None:
    self._variables = variables
    self._text_memo.clear()

  def _chunked(self, fn: Callable, x: np.ndarray, what: str, dtype=None) -> np.ndarray:
    """fn over `x` in chunks of `batch_size` rows; runs of PROGRESS_MIN_CHUNKS or more show their progress."""
    outputs = []
    num_chunks = -(-len(x) // self.batch_size)
    progress = EmbeddingProgress(len(x), what) if num_chunks >= PROGRESS_MIN_CHUNKS else None
    for start in range(0, len(x), self.batch_size):
      chunk = np.asarray(x[start:start + self.batch_size], dtype)  # a streamed image set decodes only this chunk
      padded = parallel.pad_rows(chunk, self.batch_size)
      with jax.set_mesh(self.mesh):
        out = fn(self.variables, parallel.sharded_from_host(padded, self.mesh))
      outputs.append(parallel.to_host(out)[:len(chunk)])
      if progress:
        progress.update(start + len(chunk))
    if progress:
      progress.finish()
    return np.concatenate(outputs) if outputs else np.zeros((0, 0), np.float32)

  def images(self, images: np.ndarray) -> np.ndarray:
    """[N, H, W, 3] normalised float32 (an array, or data.streamed.StreamedImages) -> [N, d] unit-norm float32."""
    return self._chunked(self._images, images, 'images', np.float32)

  def naflex_images(self, images: NaflexImages) -> np.ndarray:
    """NaflexImages of N images (host arrays: patches [N, L, P*P*3], spatial_shapes [N, 2]) -> [N, d] unit-norm
    float32, in chunks of `batch_size` images (the last padded with copies of its last image)."""
    outputs = []
    for start in range(0, len(images.patches), self.batch_size):
      chunk = NaflexImages(*(np.asarray(x[start:start + self.batch_size]) for x in images))
      rows = len(chunk.patches)
      padded = NaflexImages(*(np.pad(x, [(0, -rows % self.batch_size)] + [(0, 0)] * (x.ndim - 1), mode='edge')
                              for x in chunk))
      with jax.set_mesh(self.mesh):
        out = self._images(self.variables, NaflexImages(*(parallel.sharded_from_host(x, self.mesh) for x in padded)))
      outputs.append(parallel.to_host(out)[:rows])
    return np.concatenate(outputs) if outputs else np.zeros((0, 0), np.float32)

  def image_features(self, images: np.ndarray) -> np.ndarray:
    """[N, H, W, 3] normalised float32 -> [N, w] float32, the image tower's feature before the projection into the
    joint space (ViT: the class token after ln_post; ResNet: the attention pool's output), not normalised.

    Linear probes read these, as CLIP's (appendix A.3) and SLIP's (MoCo v3's) protocols do: the projection is
    trained for the contrastive task alone, and SLIP's SimCLR head branches off before it.
    """
    return self._chunked(self._features, images, 'image features', np.float32)

  def texts(self, captions: Sequence[str]) -> np.ndarray:
    """N captions -> [N, d] unit-norm float32 (read-only), tokenised by the model's tokenizer. A list asked for
    again, with the same variables, comes from the memo."""
    key = tuple(captions)
    if key not in self._text_memo:
      if len(self._text_memo) >= self.TEXT_MEMO_SIZE:
        self._text_memo.pop(next(iter(self._text_memo)))
      embeddings = self.tokens(self.tokenizer(list(key), context_length=self.context_length))
      embeddings.flags.writeable = False  # shared by every caller of the memo
      self._text_memo[key] = embeddings
    return self._text_memo[key]

  def tokens(self, tokens: np.ndarray) -> np.ndarray:
    """[N, context_length] integer tokens (what the model's tokenizer gives) -> [N, d] unit-norm float32."""
    return self._chunked(self._texts, np.asarray(tokens, np.int32), 'texts')

  def image_tokens(self, images: np.ndarray) -> np.ndarray:
    """[N, H, W, 3] normalised float32 -> [N, P, w] float32, the image tower's un-pooled tokens (what LocCa's decoder
    cross-attends to), neither projected nor normalised."""
    return self._chunked(self._tokens, images, 'image tokens', np.float32)

  def patch_embeddings(self, images: np.ndarray) -> np.ndarray:
    """[N, H, W, 3] normalised float32 -> [N, P, d] unit-norm patch embeddings, patches row-major (ViT towers)."""
    if not self.has_patch_embeddings:
      raise NotImplementedError('patch embeddings need a ViT image tower (model.vision.type == "vit")')
    return self._chunked(self._patches, images, 'patch embeddings', np.float32)
