"""Zero-shot and retrieval at NaFlex patch budgets (`config.eval.naflex_max_patches`): the eval set's images cut
into NaFlex patches at each budget (data/naflex.py's `naflex_patches`) and embedded by the NaFlex image tower, the
captions as usual. Results are named eval/<set>/<variant prefix>naflex<budget>_<metric>, e.g.
eval/synthetic/naflex64_zeroshot_top1.

The images are the eval set's (the model's `preprocessing` view, at config.model.vision.image_size, turned back into
the uint8 pixels it was made from): a square view keeps a square grid, so these scores measure the budget, not the
aspect ratio of the original images.
"""
from __future__ import annotations

import weakref
from typing import Callable

import jax
import numpy as np

from vlp_jax import parallel
from vlp_jax.data.image_ops import ImagePreprocessing, denormalize_image
from vlp_jax.data.naflex import naflex_patches
from vlp_jax.losses.contrastive import l2_normalize
from vlp_jax.models.naflex import NaflexImages

# The evaluators that run at each budget: those that read only image embeddings and captions.
NAFLEX_TASKS = ('zeroshot', 'retrieval')
# One jitted NaFlex embedding per encoder (its model and mesh), compiled once per budget and kept across evaluations.
_EMBEDDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def budget_prefix(budget: int) -> str:
  """The metric-name prefix of one patch budget: 'naflex<budget>_'."""
  return f'naflex{budget}_'


def naflex_tasks(tasks: tuple[str, ...]) -> tuple[str, ...]:
  """The tasks of `tasks` that run at each budget (NAFLEX_TASKS), in their order."""
  return tuple(task for task in tasks if task in NAFLEX_TASKS)


def naflex_batch(images: np.ndarray, patch_size: int, budget: int, preprocessing: ImagePreprocessing
                 ) -> tuple[np.ndarray, np.ndarray]:
  """images [n, H, W, 3] normalised float32 (an eval set's) -> (patches [n, budget, P*P*3] float32, spatial_shapes
  [n, 2] int32): `naflex_patches` of each image's uint8 pixels."""
  pixels = denormalize_image(images, preprocessing)
  pairs = [naflex_patches(image, patch_size, budget, preprocessing) for image in pixels]
  return np.stack([p for p, _ in pairs]), np.stack([s for _, s in pairs]).astype(np.int32)


def _embedder(encoder) -> Callable:
  """(variables, patches, spatial_shapes) -> [n, d] unit-norm embeddings, jitted once per encoder."""
  if encoder not in _EMBEDDERS:
    model = encoder.model
    _EMBEDDERS[encoder] = jax.jit(
        lambda v, p, s: l2_normalize(model.apply(v, NaflexImages(p, s), method=model.encode_image)['embed']),
        out_shardings=parallel.replicated(encoder.mesh))
  return _EMBEDDERS[encoder]


class BudgetEncoder:
  """An `Encoder` whose `images` embeds NaFlex patches at one patch budget; captions (and everything else) are the
  encoder's own, memo included."""

  def __init__(self, encoder, budget: int, patch_size: int, preprocessing: ImagePreprocessing):
    self.encoder, self.budget, self.patch_size, self.preprocessing = encoder, budget, patch_size, preprocessing

  def __getattr__(self, name: str):
    return getattr(self.encoder, name)

  def images(self, images: np.ndarray) -> np.ndarray:
    """[N, S, S, 3] normalised float32 (an array or streamed images) -> [N, d] unit-norm float32, in chunks of the
    encoder's batch size (the patches of one chunk at a time on the host)."""
    encoder, embed, outputs = self.encoder, _embedder(self.encoder), []
    for start in range(0, len(images), encoder.batch_size):
      chunk = np.asarray(images[start:start + encoder.batch_size], np.float32)
      patches, shapes = naflex_batch(chunk, self.patch_size, self.budget, self.preprocessing)
      pad = (-len(chunk)) % encoder.batch_size
      # padding rows get a 1 x 1 grid: an empty image would attend to nothing (their outputs are dropped)
      patches = parallel.pad_rows(patches, encoder.batch_size)
      shapes = np.concatenate([shapes, np.ones((pad, 2), np.int32)])
      with jax.set_mesh(encoder.mesh):
        out = embed(encoder.variables, parallel.sharded_from_host(patches, encoder.mesh),
                    parallel.sharded_from_host(shapes, encoder.mesh))
      outputs.append(parallel.to_host(out)[:len(chunk)])
    return np.concatenate(outputs) if outputs else np.zeros((0, 0), np.float32)


def budget_encoders(encoder, budgets: tuple[int, ...], patch_size: int, preprocessing: ImagePreprocessing
                    ) -> list[tuple[str, BudgetEncoder]]:
  """(metric prefix, encoder) for each patch budget of `budgets`."""
  return [(budget_prefix(b), BudgetEncoder(encoder, int(b), patch_size, preprocessing)) for b in budgets]
