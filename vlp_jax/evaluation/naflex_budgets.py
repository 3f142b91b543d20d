"""Zero-shot and retrieval at NaFlex patch budgets (`config.eval.naflex_max_patches`): the eval set's images cut
into NaFlex patches at each budget (data/image/naflex_patches.py's `naflex_patches`) and embedded by the NaFlex image
tower, the captions as usual. Results are named eval/<set>/<variant prefix>naflex<budget>_<metric>, e.g.
eval/synthetic/naflex64_zeroshot_top1.

The images are the eval set's (the model's `preprocessing` view, at config.model.vision.image_size, turned back into
the uint8 pixels it was made from): a square view keeps a square grid, so these scores measure the budget, not the
aspect ratio of the original images.
"""
from __future__ import annotations

import numpy as np

from vlp_jax.data.image.image_ops import ImagePreprocessing, denormalize_image
from vlp_jax.data.image.naflex_patches import naflex_patches
from vlp_jax.models.naflex_inputs import NaflexImages

# The evaluators that run at each budget: those that read only image embeddings and captions.
NAFLEX_TASKS = ('zeroshot', 'retrieval')


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


class BudgetEncoder:
  """An `Encoder` whose `images` embeds NaFlex patches at one patch budget; captions (and everything else) are the
  encoder's own, memo included."""

  def __init__(self, encoder, budget: int, patch_size: int, preprocessing: ImagePreprocessing):
    self.encoder, self.budget, self.patch_size, self.preprocessing = encoder, budget, patch_size, preprocessing

  def __getattr__(self, name: str):
    return getattr(self.encoder, name)

  def images(self, images: np.ndarray) -> np.ndarray:
    """[N, S, S, 3] normalised float32 (an array or streamed images) -> [N, d] unit-norm float32, in chunks of the
    encoder's batch size (the patches of one chunk at a time on the host), each through `Encoder.naflex_images`
    (its image program, compiled once per budget)."""
    outputs = []
    for start in range(0, len(images), self.encoder.batch_size):
      chunk = np.asarray(images[start:start + self.encoder.batch_size], np.float32)
      patches, shapes = naflex_batch(chunk, self.patch_size, self.budget, self.preprocessing)
      outputs.append(self.encoder.naflex_images(NaflexImages(patches, shapes)))
    return np.concatenate(outputs) if outputs else np.zeros((0, 0), np.float32)


def budget_encoders(encoder, budgets: tuple[int, ...], patch_size: int, preprocessing: ImagePreprocessing
                    ) -> list[tuple[str, BudgetEncoder]]:
  """(metric prefix, encoder) for each patch budget of `budgets`."""
  return [(budget_prefix(b), BudgetEncoder(encoder, int(b), patch_size, preprocessing)) for b in budgets]
