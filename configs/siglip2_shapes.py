"""SigLIP 2's recipe (docs/methods.md §5) on the embedded dataset with the tiny model, staged as the paper stages it:
the sigmoid loss on the original image and caption for the whole run and, from 80% of the steps, SILC's
local-to-global self-distillation (weight 1 x size factor) and TIPS's masked patch prediction (0.25 x size factor,
half the patches masked) against an EMA teacher of the image tower that starts there as a copy of the student. The
same data, budget and optimizer as configs/siglip_shapes.py, its control.

Not yet included: the LocCa captioning decoder (sigmoid + decoder from the start, in the paper), which is pending;
until it lands this is SigLIP 2 without the decoder.

Scale adaptations (docs/evidence.md):
  - Size factor 0.25, the paper's for B (the smallest tower it trains; ours is far smaller): weights 0.25 and 0.0625.
  - Two local crops of 16 px (the paper: 8; DINO's 96 px for 224 px images) beside the 32 px global view: each crop
    is another tower pass on a 2-core CPU.
  - DINO heads of 256 hidden units, a 64-wide bottleneck and 1024 prototypes (DINO's: 2048, 256, 65536) for a
    128-wide tower.
  - Teacher momentum 0.98 (COSMOS's 0.999 at batch 1k): the teacher lives for 80 steps, and at 0.999 it would stay
    the copy it started as.
  - The crops keep their colours (no hue jitter, no grayscale): the embedded classes are named by colour and shape,
    as configs/cosmos_shapes.py's docstring explains; DINO's flips, brightness, contrast, saturation and blur stay.

python -m vlp_jax.main --config=configs/siglip2_shapes.py --workdir=/tmp/siglip2
"""
import os

from vlp_jax.config import from_file

LABEL = 'SigLIP 2 (no decoder)'
CONTROL = 'siglip'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'siglip_shapes.py'))
  config.objective.name = 'siglip2'
  config.objective.update(
      sigmoid_weight=1.0, distill_weight=1.0, masked_weight=0.25, size_factor=0.25,
      distill_start_fraction=0.8, ema_momentum=0.98,
      num_local_crops=2, local_crop_size=16, global_crop_scale=(0.4, 1.0), local_crop_scale=(0.05, 0.4),
      crop_color_jitter=(0.4, 0.4, 0.2, 0.0), crop_grayscale_prob=0.0,
      mask_ratio=0.5, head_hidden_dim=256, head_bottleneck_dim=64, head_prototypes=1024, shared_head=False,
      student_temp=0.1, teacher_temp=0.02, center_momentum=0.9)
  return config
