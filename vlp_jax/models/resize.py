"""Weight surgery for an image tower at another shape: the position embedding resized to a new grid (another image
size or patch size) and the patch embedding resized to another patch size (FlexiViT's pseudo-inverse resize, the one
SigLIP 2 uses for its /14 models from /16 weights). Pure functions on host arrays; `resize_tower` applies them to a
tower's variables when a checkpoint's config.model.vision and the model's differ in image_size or patch_size.

Both use the interpolation the towers use at other resolutions (positional.py's: `jax.image.resize` bicubic with
antialiasing, Keys' a = -0.5), which is also torch's antialiased bicubic: timm's `resample_abs_pos_embed` and
`resample_patch_embed` agree with them (tests/unit/models/test_resize.py).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


# The shape keys a resize is defined for; a change of any other key of config.model.vision is refused.
RESIZABLE = ('image_size', 'patch_size')
# The keys whose change alters the parameters' shapes or count with no resize defined (a width, a depth, ...).
STRUCTURAL = ('type', 'width', 'layers', 'heads', 'mlp_width', 'stages')


def grid_of(vision: Any) -> int:
  """The patch grid's side of a square image: image_size // patch_size (the conv drops a remainder)."""
  return vision['image_size'] // vision['patch_size']


def resize_position_embedding(pos: Any, old_grid: int, new_grid: int, prefix: int, method: str = 'bicubic') -> Any:
  """[prefix + g*g, w] -> [prefix + n*n, w]: the spatial part resized from g x g to n x n, the `prefix` leading rows
  (a class token's: 1 for CLIP's ViT, 0 for SigLIP's) kept; the same array at the same grid. `method`: bicubic (the
  towers' own: positional.py), or 'linear', whose weights are never negative (for Adam's second moments, which must
  stay positive: training/stages.py). A numpy array gives a numpy array; a jax array (sharded over processes too)
  a jax array."""
  if old_grid == new_grid:
    return pos
  spatial = jnp.asarray(pos[prefix:], jnp.float32).reshape(old_grid, old_grid, -1)
  spatial = jax.image.resize(spatial, (new_grid, new_grid, spatial.shape[-1]), method=method)
  out = jnp.concatenate([jnp.asarray(pos[:prefix]), spatial.reshape(new_grid * new_grid, -1).astype(pos.dtype)])
  return np.asarray(out) if isinstance(pos, np.ndarray) else out


def patch_resize_matrix(old: int, new: int) -> np.ndarray:
  """[new*new, old*old] float64: column j is the old x old one-hot patch j resized to new x new (bicubic, the
  towers' interpolation); it maps a flattened old patch to the resized patch."""
  basis = jnp.eye(old * old, dtype=jnp.float32).reshape(old * old, old, old)
  resized = jax.vmap(lambda patch: jax.image.resize(patch, (new, new), 'bicubic'))(basis)
  return np.asarray(resized, np.float64).reshape(old * old, new * new).T


def resize_patch_kernel(kernel: np.ndarray, new_patch: int) -> np.ndarray:
  """[p, p, in, out] conv kernel -> [q, q, in, out] (q = new_patch), FlexiViT's pseudo-inverse resize: the new
  kernel w' minimises |M^T w' - w| for the patch resize M (`patch_resize_matrix`), so that <resize(x), w'> equals
  <x, w> for every patch x when upsampling (q > p), and approximates it otherwise. The same array at the same size."""
  old = kernel.shape[0]
  if old == new_patch:
    return kernel
  if kernel.shape[1] != old:
    raise ValueError(f'the patch kernel must be square, got shape {kernel.shape}')
  pinv = np.linalg.pinv(patch_resize_matrix(old, new_patch).T)  # [q*q, p*p]
  flat = np.asarray(kernel, np.float64).reshape(old * old, -1)
  return (pinv @ flat).reshape(new_patch, new_patch, *kernel.shape[2:]).astype(kernel.dtype)


def shape_changes(saved_vision: Any, vision: Any) -> tuple[dict[str, tuple], dict[str, tuple]]:
  """({key: (checkpoint, model)} of the RESIZABLE keys that differ, the same of the STRUCTURAL keys that differ)
  between a checkpoint's config.model.vision and the model's."""
  plain = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v  # noqa: E731  (JSON gives lists for tuples)
  differ = lambda keys: {k: (plain(saved_vision.get(k)), plain(vision.get(k))) for k in keys  # noqa: E731
                         if plain(saved_vision.get(k)) != plain(vision.get(k))}
  return differ(RESIZABLE), differ(STRUCTURAL)


def resize_tower(visual: dict, saved_vision: Any, vision: Any, prefix: int | None) -> tuple[dict, list[str]]:
  """A checkpoint's image-tower parameters (the `visual` subtree, a dict of host arrays) at the model's image_size
  and patch_size -> (the resized subtree, one line per resized variable saying from and to).

  `prefix`: the rows before the patches in the tower's `positional_embedding` (its tower class's `position_prefix`),
  None for a tower with no resize defined. Raises ValueError naming the keys when a resize is asked of such a
  tower, or when a structural key (width, depth, ...) differs too (there no resize is defined)."""
  resizable, structural = shape_changes(saved_vision, vision)
  if not resizable:
    return visual, []
  if structural:
    raise ValueError('no resize is defined for a change of ' + ', '.join(
        f'config.model.vision.{k} (checkpoint {a!r}, model {b!r})' for k, (a, b) in structural.items()))
  if prefix is None:
    raise ValueError(f"config.model.vision.type={vision.get('type')!r} defines no resize for "
                     + ', '.join(f'config.model.vision.{k} (checkpoint {a}, model {b})'
                                 for k, (a, b) in resizable.items()))
  out, notes = dict(visual), []
  old_grid, new_grid = grid_of(saved_vision), grid_of(vision)
  if old_grid != new_grid:
    pos = visual['positional_embedding']
    out['positional_embedding'] = resize_position_embedding(pos, old_grid, new_grid, prefix)
    notes.append(f'visual/positional_embedding {tuple(pos.shape)} -> {tuple(out["positional_embedding"].shape)} '
                 f'(grid {old_grid}x{old_grid} -> {new_grid}x{new_grid}, bicubic)')
  old_patch, new_patch = saved_vision['patch_size'], vision['patch_size']
  if old_patch != new_patch:
    kernel = visual['conv1']['kernel']
    out['conv1'] = {**visual['conv1'], 'kernel': resize_patch_kernel(kernel, new_patch)}
    notes.append(f'visual/conv1/kernel {tuple(kernel.shape)} -> {tuple(out["conv1"]["kernel"].shape)} '
                 f'(patch {old_patch} -> {new_patch}, pseudo-inverse resize)')
  return out, notes
