"""SigLIP 2's recipe (docs/methods.md §5) on the embedded dataset with the tiny model, staged as the paper stages it:
the sigmoid loss and LocCa's decoder (caption, referring expression, grounded caption; weight 1, half the captions
predicted in parallel) on the original image and caption for the whole run and, from 80% of the steps, SILC's
local-to-global self-distillation (weight 0.2 x size factor, chosen below) and TIPS's masked patch prediction
(0.25 x size factor, half the patches masked) against an EMA teacher of the image tower that starts there as a copy of the student. The
same data, budget and optimizer as configs/siglip_shapes.py. The records also carry each object's box and description
(data.synthetic.regions), which only the decoder reads; its control, lab/experiments/siglip_regions.py, trains
on the same records without reading them (the regions are information SigLIP does not use).

Scale adaptations (docs/evidence.md):
  - The renderer's boxes stand in for LocCa's detector; 32 coordinate bins per axis, one per pixel of a 32 px image.
  - The decoder predicts only the text ids of the training records' captions and region descriptions (60 of CLIP's
    49,408, plus end, padding and UNK; decoder_vocabulary='train_texts'): over the whole vocabulary its logits made a
    step 28.5x a SigLIP step's FLOPs, and a compute-matched control hours of CPU per seed. Every training text is in
    it, so the decoder's task is unchanged; only the softmax's normaliser leaves out ids the data never uses.
  - Size factor 0.25, the paper's for B (the smallest tower it trains; ours is far smaller).
  - Self-distillation weight 0.2 (0.05 in the loss; the paper's 1, 0.25 in the loss; masked prediction keeps its
    0.25, 0.0625 in the loss). COSMOS found SILC's 1:1 weight harmful at CC3M scale, so the weight was chosen
    between 1 and 0.2 on development seeds 0 and 1 by zero-shot top-1, by a rule fixed before the runs: 0.2 had the
    higher mean, 0.1627 against 0.1620, a difference far smaller than the seeds' (benchmarks/RESULTS.md).
  - Two local crops of 16 px (the paper: 8; DINO's 96 px for 224 px images) beside the 32 px global view: each crop
    is another tower pass on a 2-core CPU.
  - DINO heads of 256 hidden units, a 64-wide bottleneck and 1024 prototypes (DINO's: 2048, 256, 65536) for a
    128-wide tower.
  - Teacher momentum 0.98 (COSMOS's 0.999 at batch 1k): the teacher lives for 80 steps, and at 0.999 it would stay
    the copy it started as.
  - The crops keep their colours (no hue jitter, no grayscale): the embedded classes are named by colour and shape
    (docs/data.md), so a hue shift or grayscale changes a crop's class; DINO's flips, brightness, contrast,
    saturation and blur stay.

python -m vlp_jax.main --config=configs/siglip2_shapes.py --workdir=/tmp/siglip2

`get_config('naflex')` (--config=configs/siglip2_shapes.py:naflex) adds SigLIP 2's NaFlex stage (§2.4.2,
docs/methods.md): the image tower becomes SigLIP's (MAP head, no class token; the only tower that takes NaFlex
patches) at the same size, and from 90% of the steps each batch is NaFlex patches of the whole images at a patch
budget drawn per batch from the paper's set scaled to our 16-patch images, (8, 16, 36, 49, 64) as (128, 256, 576,
784, 1024) is to 256; self-distillation and masked prediction stop there, as in the paper. Zero-shot and retrieval
are also evaluated at budgets 16 and 64 (eval/<set>/naflex16_*, naflex64_*). The model is saved as a NaFlex model
(model.vision.naflex, 16 patches by default): `vlp_jax.load(...).encode_image` takes images of any aspect ratio. Not the paper's branch: one run, not
a restart from 90% with a stretched schedule, and every length at the same batch size.
"""
import os

from vlp_jax.config import from_file
from vlp_jax.errors import ConfigError
from vlp_jax.models.siglip_vit import SiglipViTTower


VARIANTS = ('naflex',)  # get_config's argument
# The NaFlex variant: SigLIP 2's sequence lengths over its 256 patches, scaled to the tiny model's 16 (32 px, patch 8).
NAFLEX_SEQUENCE_LENGTHS = (8, 16, 36, 49, 64)
NAFLEX_EVAL_BUDGETS = (16, 64)


def get_config(variant=None):
  if variant is not None and variant not in VARIANTS:
    raise ConfigError(f'--config=configs/siglip2_shapes.py:{variant}: no such variant; valid choices: '
                      f'{list(VARIANTS)}')
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'siglip_shapes.py'))
  config.objective.name = 'siglip2'
  config.data.synthetic.regions = True  # the boxes and descriptions of the location tasks
  # box prediction (the decoder's, a probe's and chance) and the decoder's own captions (CIDEr-D; added after the
  # methods table's runs at 82f0844, whose rows were evaluated without it)
  config.eval.tasks = (*config.eval.tasks, 'referring', 'captioning')
  config.objective.update(
      sigmoid_weight=1.0, distill_weight=0.2, masked_weight=0.25, size_factor=0.25,
      distill_start_fraction=0.8, ema_momentum=0.98,
      num_local_crops=2, local_crop_size=16, global_crop_scale=(0.4, 1.0), local_crop_scale=(0.05, 0.4),
      crop_color_jitter=(0.4, 0.4, 0.2, 0.0), crop_grayscale_prob=0.0,
      mask_ratio=0.5, head_hidden_dim=256, head_bottleneck_dim=64, head_prototypes=1024, shared_head=False,
      student_temp=0.1, teacher_temp=0.02, center_momentum=0.9,
      decoder_weight=1.0, decoder_tasks=('cap', 'aref', 'gcap'), decoder_parallel_prob=0.5, decoder_box_bins=32,
      decoder_length=0, decoder_layers=0, decoder_loss_on_condition=True, decoder_normalize='sequence',
      decoder_vocabulary='train_texts')
  if variant == 'naflex':
    vision = config.model.vision
    config.model.vision = SiglipViTTower.options(vision.image_size, vision.patch_size, vision.width, vision.layers,
                                                 vision.heads)
    # a NaFlex model: vlp_jax.load(...).encode_image cuts images into NaFlex patches, 16 by default (max_patches)
    config.model.vision.update(naflex=True, max_patches=(vision.image_size // vision.patch_size) ** 2)
    config.objective.naflex_start_fraction = 0.9
    config.data.naflex.sequence_lengths = NAFLEX_SEQUENCE_LENGTHS
    config.eval.naflex_max_patches = NAFLEX_EVAL_BUDGETS
  return config
