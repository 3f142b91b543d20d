"""The tables a model config picks from: image towers (`config.model.vision.type`) and compute dtypes
(`config.model.dtype`). An image tower is one file: a `VisionTower` subclass registered by name,

  @VISION_TOWERS.register('vit')
  class ViTTower(VisionTower):
    patch_based = True                      # capabilities the rest of the code asks about
    @classmethod
    def default_config(cls) -> dict: ...    # its options under config.model.vision, with their defaults
    @classmethod
    def validate(cls, vision, model) -> None: ...   # ValueError naming the key; run by config validation
    @classmethod
    def build(cls, vision, embed_dim, act, dtype, stack) -> nn.Module: ...

The module `build` returns maps [B, H, W, 3] images to {'embed': [B, d], 'cls': [B, w], 'tokens': [B, N, w]} (see
vit.py; 'siglip_vit' also takes models/naflex_inputs.NaflexImages, SigLIP 2's variable-length images); `stack` (transformer.BlockStack) says how transformer blocks are rematerialised and scanned. The module is
called as `module(images, train=..., with_tokens=..., rng=...)`: `rng` is None, or when training one key per image
([B] typed keys, from the objective's per-example keys; objectives/base.py). A stochastic option (the ViT's patch
dropout, drop path, ...) is active only when `train`, and draws image i's randomness from rng[i] alone, e.g.

  keep = jax.vmap(lambda key: jax.random.bernoulli(key, 1 - p, (num_patches,)))(fold_in_rows(rng, SITE))

with a constant SITE per random site of the tower. Drawn that way, an image's randomness does not depend on which
other images share the call, so the tower stays per example and decoupled accumulation stays exact. (Not flax's
`make_rng`: one key for the whole call would draw differently for each micro-batching.) Deterministic towers ignore
`rng`.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from vlp_jax.registry import Registry

VISION_TOWERS = Registry('image tower', 'model.vision.type', package='vlp_jax.models')

DTYPES = Registry('compute dtype', 'model.dtype')
DTYPES.add('float32', jnp.float32)
DTYPES.add('bfloat16', jnp.bfloat16)
DTYPES.add('float16', jnp.float16)


class VisionTower:
  """An image tower's registry entry: its options, their checks, its capabilities and its builder.

  Capabilities, read by code outside the tower instead of testing tower names:
    patch_based: patch tokens out of a patch embedding (the patch-token evaluations, patch dropout, preprocessing
      at the patch size);
    layer_groups: transformer blocks that make layer groups (locked-tower groups and layer-wise lr decay,
      models/groups.py); a tower without them locks whole.
    position_prefix: the rows of its `positional_embedding` before the patches' (a class token's), for weights
      resized to another image or patch size (models/resize.py); None: no resize defined.
  """
  name: str = ''
  patch_based: bool = False
  layer_groups: bool = False
  position_prefix: int | None = None

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    """Every key `config.model.vision` may have for this tower, with its default. The keys below are the ones code
    outside the tower reads (FLOP counts, layer groups, preprocessing); a tower adds its own options."""
    return dict(type=cls.name, image_size=224, patch_size=32, width=768, layers=0, heads=12, stages=(),
                patch_dropout=0.0, mlp_width=0, ln_eps=1e-5, patch_embedding='conv')

  @classmethod
  def validate(cls, vision: ml_collections.ConfigDict, model: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the key when an option of `vision` (config.model.vision, completed with the
    defaults) is invalid; `model` is config.model. Called by config validation, before anything is built."""
    if vision.patch_dropout and not cls.patch_based:  # the tower would ignore it silently
      raise ValueError(f'config.model.vision.patch_dropout={vision.patch_dropout} applies to patch-based towers only '
                       f"({', '.join(patch_based_towers())}), not config.model.vision.type='{cls.name}'; leave it at 0")
    if vision.get('patch_embedding', 'conv') != 'conv' and not cls.patch_based:
      raise ValueError(f"config.model.vision.patch_embedding={vision.patch_embedding!r} applies to patch-based towers "
                       f"only ({', '.join(patch_based_towers())}), not config.model.vision.type='{cls.name}'; leave it "
                       "at 'conv'")

  @classmethod
  def build(cls, vision: ml_collections.FrozenConfigDict, embed_dim: int, act: str, dtype: Any, stack: Any):
    """The flax module of this tower for `vision` (config.model.vision)."""
    raise NotImplementedError


def vision_tower(vision: Any) -> type[VisionTower]:
  """The registered tower class of a vision config (config.model.vision, or its `type` string)."""
  return VISION_TOWERS.get(vision if isinstance(vision, str) else vision.type)


def patch_based_towers() -> list[str]:
  """The names of the registered towers made of patch tokens, for messages."""
  return [name for name, tower in VISION_TOWERS.items() if tower.patch_based]


def with_tower_defaults(vision: Any) -> ml_collections.ConfigDict:
  """config.model.vision with the options it does not set at its tower's defaults (what `validate` and `build`
  get)."""
  given = vision.to_dict() if isinstance(vision, ml_collections.ConfigDict) else dict(vision)
  return ml_collections.ConfigDict({**vision_tower(vision).default_config(), **given})


def check_heads(tower: str, width: int, heads: int) -> None:
  """ValueError naming config.model.<tower>.width/heads when the width does not split into the heads."""
  if width % heads:
    raise ValueError(f'config.model.{tower}.width={width} is not divisible by config.model.{tower}.heads={heads}')


def check_patch_dropout(rate: float) -> None:
  if not 0 <= rate < 1:
    raise ValueError(f'config.model.vision.patch_dropout={rate} must be in [0, 1) (the fraction of patch tokens '
                     'dropped in training)')


def fold_in_rows(keys: jax.Array, data: int | jax.Array) -> jax.Array:
  """[B] keys -> [B] keys: fold_in(keys[i], data) (`data` an int, or [B] ints: one per row)."""
  return jax.vmap(jax.random.fold_in)(keys, jnp.broadcast_to(jnp.asarray(data, jnp.uint32), keys.shape))
