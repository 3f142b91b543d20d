"""Where each CLIP parameter sits: in which tower, and at which depth of it, for the optimizer's per-tower rules
(locked towers, layer-wise learning-rate decay; training/optim.py).

The parameter tree (clip.py) holds the image tower under `visual/` and the text tower at the top level. A
transformer tower of L blocks is read as L + 2 positions:

  position 0          the embeddings: ViT `conv1`, `class_embedding`, `positional_embedding`, `ln_pre`;
                      text `token_embedding`, `positional_embedding`
  position i + 1      block i (`transformer/resblocks_i`, or row i of the stacked `transformer/resblocks` of the
                      scanned layout, which holds blocks 0 .. L-2; transformer.BlockStack)
  position L + 1      what follows the blocks: the final LayerNorm (`ln_post` / `ln_final`) and the projection
                      (`proj` / `text_projection`)

`layer_ids` gives these positions: the layer ids of BEiT's and timm's layer-wise lr decay. `lock_groups` gives
open_clip's lock groups, the same positions except that the final LayerNorm joins the last block (group L), the
projection alone being group L + 1. Everything else (logit scale and bias, objective heads) is in no tower. A ResNet
image tower has no blocks in this sense: it is one tower, but it has no positions.
"""
from __future__ import annotations

import jax
import numpy as np

from vlp_jax.parallel import SCANNED_BLOCKS

IMAGE, TEXT = 'image', 'text'
TOWERS = (IMAGE, TEXT)
IMAGE_ROOT = 'visual'  # the image tower's subtree; the text tower's parameters sit at the top level

_EMBED, _BLOCKS, _FINAL_NORM, _PROJECTION = 'embed', 'blocks', 'final_norm', 'projection'
# The parts of a transformer tower, by the name under the tower's root (the ViT's under `visual/`).
_PARTS = {
    IMAGE: {'conv1': _EMBED, 'class_embedding': _EMBED, 'positional_embedding': _EMBED, 'ln_pre': _EMBED,
            'transformer': _BLOCKS, 'ln_post': _FINAL_NORM, 'proj': _PROJECTION,
            'attn_pool': _PROJECTION},  # SigLIP's attention-pooling head takes the projection's place
    TEXT: {'token_embedding': _EMBED, 'positional_embedding': _EMBED, 'transformer': _BLOCKS,
           'ln_final': _FINAL_NORM, 'text_projection': _PROJECTION, 'text_projection_bias': _PROJECTION},
}
_BLOCK_PREFIX = f'{SCANNED_BLOCKS}_'  # `resblocks_{i}`: one block of its own


def path_names(path: tuple) -> tuple[str, ...]:
  """The dict keys of a jax tree path, as strings: ('visual', 'transformer', 'resblocks_0', ...)."""
  return tuple(str(getattr(key, 'key', key)) for key in path)


def tower_of(path: tuple) -> str | None:
  """IMAGE, TEXT, or None for a parameter outside both towers (logit scale, an objective's head)."""
  names = path_names(path)
  if not names:
    return None
  if names[0] == IMAGE_ROOT:
    return IMAGE
  return TEXT if names[0] in _PARTS[TEXT] else None


def _transformer(params: dict, tower: str) -> dict | None:
  root = params.get(IMAGE_ROOT, {}) if tower == IMAGE else params
  blocks = root.get('transformer') if isinstance(root, dict) else None
  return blocks if isinstance(blocks, dict) else None


def num_blocks(params: dict, tower: str) -> int | None:
  """L, the transformer blocks of `tower` in a parameter tree (or any tree of its structure: gradients, updates) in
  either layout: the `resblocks_i` plus the length of the stacked `resblocks`. None for a tower without blocks (a
  ResNet) or absent from the tree."""
  blocks = _transformer(params, tower)
  if blocks is None:
    return None
  count = sum(1 for key in blocks if key.startswith(_BLOCK_PREFIX))
  if SCANNED_BLOCKS in blocks:
    count += jax.tree.leaves(blocks[SCANNED_BLOCKS])[0].shape[0]
  return count


def _position(path: tuple, depth: int, final_norm: int) -> np.ndarray:
  names = path_names(path)
  tower = tower_of(path)
  inner = names[1:] if tower == IMAGE else names
  part = _PARTS[tower].get(inner[0]) if tower is not None and inner else None
  if part is None:
    raise ValueError(f"parameter {'/'.join(names)} has no layer position: only the parameters of a transformer "
                     f'tower have one ({", ".join(f"{t}: {sorted(p)}" for t, p in _PARTS.items())})')
  if part == _EMBED:
    return np.array(0)
  if part == _BLOCKS:
    block = inner[1]
    if block == SCANNED_BLOCKS:  # blocks 0 .. depth - 2, one per row of the leading axis
      return np.arange(1, depth)
    return np.array(int(block[len(_BLOCK_PREFIX):]) + 1)
  return np.array(final_norm if part == _FINAL_NORM else depth + 1)


def layer_ids(path: tuple, depth: int) -> np.ndarray:
  """The layer id of a tower parameter in a tower of `depth` blocks (BEiT's / timm's, see the module docstring):
  0 for the embeddings, i + 1 for block i, depth + 1 for the final LayerNorm and the projection. An int array of
  shape () or, for a stacked leaf, [depth - 1] (one per row). ValueError outside a transformer tower."""
  return _position(path, depth, final_norm=depth + 1)


def lock_groups(path: tuple, depth: int) -> np.ndarray:
  """open_clip's lock group of a tower parameter (`VisionTransformer.lock`, `lock_text_tower`): as `layer_ids`,
  except that the final LayerNorm is in group `depth`, with the last block; the projection alone is depth + 1."""
  return _position(path, depth, final_norm=depth)

