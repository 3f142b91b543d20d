"""SigLIP 2's decoder alone on frozen towers (docs/evidence.md, "SigLIP 2's boxes"): from a siglip_compute checkpoint
only LocCa's decoder trains (both towers locked; sigmoid weight 0, so the logit scale and bias get no gradient), on
referring expressions alone with 8 coordinate bins per axis (the recipe's 32), for 1,600 steps of the recipe's
optimizer; `:true` reads the records' own boxes, `:shuffled` another train record's (siglip2_ablation's shuffled_boxes).
"""
import os

from vlp_jax.config import from_file

VARIANTS = ('true', 'shuffled')  # get_config's argument
STEPS = 1600
BOX_BINS = 8  # per axis, declared before any run: 4 px a bin on the 32 px images
# dotted key -> value, on configs/siglip2_shapes.py (true) or siglip2_ablation.py:shuffled_boxes (shuffled)
DECODER_ALONE = {
    'objective.sigmoid_weight': 0.0, 'objective.distill_weight': 0.0, 'objective.masked_weight': 0.0,
    'objective.decoder_tasks': ('aref',), 'objective.decoder_box_bins': BOX_BINS,
    'optim.lock_image': True, 'optim.lock_text': True,
    'init.require_checkpoint': True,  # the towers: --config.init.checkpoint=<a siglip_compute workdir>
    'total_steps': STEPS,
    # the boxes, and zero-shot as the check that the towers did not move (siglip_compute's own figure)
    'eval.tasks': ('referring', 'zeroshot'), 'eval.datasets': ('synthetic',),
}


def get_config(variant: str):
  if variant not in VARIANTS:
    raise ValueError(f'siglip2_boxes_decoder.py: unknown variant {variant!r}; choose one of {list(VARIANTS)}')
  here = os.path.dirname(os.path.abspath(__file__))
  config = (from_file(os.path.join(here, '..', '..', 'configs', 'siglip2_shapes.py')) if variant == 'true'
            else from_file(os.path.join(here, 'siglip2_ablation.py'), 'shuffled_boxes'))
  config.update_from_flattened_dict(DECODER_ALONE)
  return config
