"""ZeroVL mixup ablation: ZeroVL's two-target loss on unmixed inputs, max(lam, 1 - lam) on the pair and the rest on the
reversed partner (label smoothing toward one other row): what mixup's targets add beside its mixed inputs. Versus
configs/zerovl_shapes.py (mixed inputs and these targets) and configs/clip_shapes.py (neither).
"""
import os

from vlp_jax.config import from_file

LABEL = "ZeroVL's two-target loss, nothing mixed (label smoothing)"


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zerovl_shapes.py'))
  config.objective.mixup_modality = 'targets_only'
  return config
