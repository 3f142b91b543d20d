"""ZeroVL on the embedded dataset with the tiny model: coin-flipping mixup (lambda ~ Beta(0.1, 0.1), a fair coin per
step between pixel mixup of the images and mixup of the projected text embeddings) with its two-target loss, on
mixed batches and without text augmentation. The same model, data, budget and optimizer as configs/clip_shapes.py (a
learned temperature, as there, so that only ZeroVL's components differ; configs/zerovl_multisource.py has the paper's
constant 0.02 and all three components). Without mixup the objective is CLIP exactly.

Its ablations are in configs/experiments/zerovl_*.py (`benchmarks/methods.py --methods=ablate_zerovl`,
`ablate_mixup`, `long_budget`, `zerovl_settings`): each half of the coin alone, the two-target loss on unmixed inputs,
4x the budget, the paper's temperature. benchmarks/RESULTS.md (parts 7 and 8) has where mixup costs and where it pays.

The paper's other two components are switched off because of what the embedded data is, not because they are wrong
(configs/zerovl_debiased_shapes.py runs all three):
  - debiased (single-source) batches: each source's alt-text captions come from a few templates over 36 classes, so a
    batch of one source holds many more exact duplicate captions than a mixed batch, each a false negative that the
    contrastive loss pushes apart. ZeroVL's sources (SBU, VG, CC3M, CC12M) have millions of distinct captions. The
    runs without repeated captions (`data.synthetic.captions='detailed'`, from scratch and from a trained CLIP, with
    and without gradient clipping) are the `zerovl_settings` group.
  - text augmentation: 20% of the tokens of a 5-10 token caption whose class is two words (a colour and a shape)
    drops or replaces a class word in about a third of the captions.

python -m vlp_jax.main --config=configs/zerovl_shapes.py --workdir=/tmp/zerovl
"""
import os

from vlp_jax.config import from_file

LABEL = 'ZeroVL'  # benchmarks/methods.py, run `zerovl`


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.data.mixing = 'mixed'
  config.objective.name = 'zerovl'
  config.objective.mixup = True
  config.objective.mixup_alpha = 0.1
  config.objective.text_augment = False
  config.objective.fixed_temperature = 0.0  # the learned temperature, as CLIP here (the paper: a constant 0.02)
  return config
