"""The two-tower model (clip.py), its image towers (one file each, registered in towers.VISION_TOWERS) and the
presets by name (presets.py)."""
from __future__ import annotations

from vlp_jax.models.clip_model import CLIP, build_model, init_variables  # noqa: F401
from vlp_jax.models.presets import PRESETS, complete, preset, text_options, validate_text  # noqa: F401
