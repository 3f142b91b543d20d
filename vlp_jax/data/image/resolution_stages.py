"""Staged resolution in one run (`config.data.resolution_stages`; CLIPA, OpenVision's progressive curriculum, the
resolution switch of SigLIP 2's fixed-resolution branch): from a fraction of the steps, an image size; most steps at
a low size, a short last stage at the model's own (config.model.vision.image_size).

Pure schedule functions, read by the views (the image size of an example from the step its batch is for,
pipeline.STEP_KEY), by config validation and by the training loop (training/stages.py: the model, the state's
position embedding and the compiled step of each stage).
"""
from __future__ import annotations

from typing import Sequence


def stage_starts(stages: Sequence[Sequence[float]], total_steps: int) -> tuple[tuple[int, int], ...]:
  """((first batch index, image size), ...) of `stages` ((fraction of total_steps, image size), ...): stage i runs
  from batch index round(fraction_i * total_steps) (0-based: the batch of train step index + 1). () when off."""
  return tuple((int(round(float(fraction) * total_steps)), int(size)) for fraction, size in stages)


def size_at(starts: Sequence[tuple[int, int]], index: int, default: int) -> int:
  """The image size of batch `index` under `starts` (stage_starts' output); `default` when there are no stages."""
  size = default
  for first, stage_size in starts:
    if index >= first:
      size = stage_size
  return size


def check_stages(stages: Sequence, image_size: int, patch_size: int, total_steps: int) -> None:
  """ValueError naming config.data.resolution_stages unless it is () or ((0.0, s0), (f1, s1), ...): fractions
  from 0 rising in [0, 1), each stage at least one step long, sizes positive multiples of the patch size, and the
  last the model's image_size (what the run ends with, and evaluates and exports at)."""
  key = 'config.data.resolution_stages'
  if not stages:
    return
  try:
    pairs = [(float(fraction), int(size)) for fraction, size in stages]
  except (TypeError, ValueError):
    raise ValueError(f'{key}={stages!r} must be pairs (fraction of the steps, image size), e.g. '
                     '((0.0, 112), (0.9, 224))') from None
  fractions = [fraction for fraction, _ in pairs]
  if fractions[0] != 0.0 or any(not 0 <= f < 1 for f in fractions) or sorted(set(fractions)) != fractions:
    raise ValueError(f'{key}={stages!r}: the fractions must start at 0.0 and rise within [0, 1), e.g. '
                     '((0.0, 112), (0.9, 224))')
  firsts = [first for first, _ in stage_starts(pairs, total_steps)]
  if len(set(firsts)) != len(firsts):
    raise ValueError(f'{key}={stages!r}: at config.total_steps={total_steps} two stages start at the same step')
  bad = [size for _, size in pairs if size <= 0 or size % patch_size]
  if bad:
    raise ValueError(f'{key}={stages!r}: image sizes {bad} are not positive multiples of '
                     f'config.model.vision.patch_size={patch_size}')
  if pairs[-1][1] != image_size:
    raise ValueError(f'{key}={stages!r}: the last stage must be at config.model.vision.image_size={image_size} (the '
                     f'size the run ends, evaluates and exports at); set it last, or set the model\'s image_size')
