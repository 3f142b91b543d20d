"""COSMOS on the embedded dataset with the tiny model: an EMA teacher (momentum 0.99 for this short run), 2 global
image views (32px) + 1 local crop (16px, scale 0.05-0.4) with DINO's augmentations, 2 global text crops + 1 local
one (one sentence, 16 tokens), and the cross-attention module. The data, budget, seed and optimizer are the same as
configs/clip_shapes.py. The eval reports the student's [cls] and [eot] embeddings, as the paper evaluates (the
cross-attention is not used at inference); the teacher is logged as eval/<dataset>/teacher_*.

Two deviations from the paper, each with its ablation in configs/experiments/ (`benchmarks/methods.py
--methods=ablate_cosmos`; the figures are in benchmarks/RESULTS.md):
  - The global image views are the whole image (`global_crop_scale=(1, 1)`; flips and DINO's colour, blur and
    solarisation stay), not RandomResizedCrop(0.4-1) (`cosmos_paper_crop`): at 32px, with the named object a quarter
    of the side, a random crop cuts it out while the caption still names it.
  - The short alt-text caption is one more sentence of the text-crop pool (`caption_in_text_crops`, as the authors'
    code samples DreamLIP's raw caption beside the long ones) and the first global text crop of every example
    (`caption_first_global`); the other crops are sampled from the pool as the paper does. With the long caption
    only (the paper's text, `cosmos_no_caption`) the model never sees the alt-text style that the short-caption
    retrieval queries with.

The paper uses 6 + 6 local crops (configs/cosmos_cc3m.py does); 1 + 1 keep the run short on a 2-core CPU: at this
scale the text tower dominates the step, and every crop adds a text-tower pass.

python -m vlp_jax.main --config=configs/cosmos_shapes.py --workdir=/tmp/cosmos
"""
import os

from vlp_jax.config import from_file

LABEL = 'COSMOS'  # benchmarks/methods.py, run `cosmos`


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.objective.name = 'cosmos'
  config.objective.ema_momentum = 0.99
  config.objective.num_local_crops = 1
  config.objective.num_local_texts = 1
  config.objective.global_crop_scale = (1.0, 1.0)  # the whole image (the paper: 0.4-1; see the docstring)
  config.objective.local_crop_size = 16
  config.objective.local_text_context_length = 16  # a sentence of the embedded captions is at most 14 tokens
  config.objective.caption_in_text_crops = True
  config.objective.caption_first_global = True
  config.objective.crop_color_jitter = (0.4, 0.4, 0.2, 0.1)
  config.objective.crop_grayscale_prob = 0.2
  config.objective.distill_weight = 1.0
  return config
