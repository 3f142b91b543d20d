"""Vision-language pre-training in JAX/Flax. `vlp_jax.load(checkpoint)` opens a checkpoint as a model that embeds
images and captions (see vlp_jax/loader.py); the commands are `python -m vlp_jax.main`, `.evaluate`, `.embed`,
`.weights` and `.data.convert` (README.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from vlp_jax import allocator

allocator.retain_freed_memory()  # before jax makes its CPU threads: see vlp_jax/allocator.py

if TYPE_CHECKING:
  from vlp_jax.loader import LoadedModel


def load(checkpoint: str, batch_size: int | None = None) -> LoadedModel:
  """A checkpoint (a workdir, a step directory or an imported checkpoint) -> a `loader.LoadedModel` with
  `encode_image`, `encode_text`, `preprocess` and `tokenize`. batch_size: rows per forward pass (default 256, as
  `python -m vlp_jax.embed`). See `vlp_jax.loader.load`."""
  from vlp_jax import loader  # here, not at the top: `import vlp_jax` stays free of jax, flax and orbax
  return loader.load(checkpoint, loader.DEFAULT_BATCH_SIZE if batch_size is None else batch_size)
