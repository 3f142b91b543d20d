"""Vision-language pre-training in JAX/Flax. `vlp_jax.load(checkpoint)` opens a checkpoint as a model that embeds
images and captions (vlp_jax/inference.py); the commands are `python -m vlp_jax.main`, `.evaluate`, `.embed`,
`.weights` and `.convert` (vlp_jax/cli/, README.md). Importing the package changes no process-wide setting."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from vlp_jax.inference import LoadedModel


def load(checkpoint: str, batch_size: int | None = None, ema: bool = False) -> LoadedModel:
  """A checkpoint (a workdir, a step directory or an imported checkpoint) -> an `inference.LoadedModel` with
  `encode_image`, `encode_text`, `preprocess` and `tokenize`. batch_size: rows per forward pass (default 256, as
  `python -m vlp_jax.embed`); ema: the run's EMA of the weights (config.ema.decay) instead of its parameters. See
  `vlp_jax.inference.load`."""
  # Imported here so that `import vlp_jax` stays free of jax, flax and orbax (a notebook pays for them on first use).
  from vlp_jax import inference
  return inference.load(checkpoint, inference.DEFAULT_BATCH_SIZE if batch_size is None else batch_size, ema)
