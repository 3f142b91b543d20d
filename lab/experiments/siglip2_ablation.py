"""SigLIP 2's ablations: configs/siglip2_shapes.py with only the keys of one ablation changed, chosen by the argument
(`--config=lab/experiments/siglip2_ablation.py:decoder_only`). Each is a row of the methods table against
siglip_regions; lab/catalogue.py says what each is compared with and what it is expected to show.
"""
import os

from vlp_jax.config import from_file

# ablation -> what it changes (dotted config key -> value); every other key is the recipe's
ABLATIONS = {
    # no SILC, no TIPS: the sigmoid loss and LocCa's decoder for the whole run
    'decoder_only': {'objective.distill_weight': 0.0, 'objective.masked_weight': 0.0},
    # SILC alone: the sigmoid loss, then local-to-global self-distillation from 80% of the steps
    'distill_only': {'objective.decoder_weight': 0.0, 'objective.masked_weight': 0.0},
    # TIPS alone: the sigmoid loss, then masked patch prediction (one global view, no local crops)
    'masked_only': {'objective.decoder_weight': 0.0, 'objective.distill_weight': 0.0},
    # the decoder on captions only: no referring expressions, no grounded captions
    'captions_only': {'objective.decoder_tasks': ('cap',)},
    # every training record carries another record's regions (a fixed derangement; eval sets untouched)
    'shuffled_boxes': {'data.synthetic.shuffle_regions': True},
}


def get_config(ablation: str):
  if ablation not in ABLATIONS:
    raise ValueError(f'siglip2_ablation.py: unknown ablation {ablation!r}; choose one of {sorted(ABLATIONS)}')
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs',
                                  'siglip2_shapes.py'))
  for dotted, value in ABLATIONS[ablation].items():
    *parents, leaf = dotted.split('.')
    node = config
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config
