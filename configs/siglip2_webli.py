"""SigLIP 2 B/16 at the paper's scale (Tschannen et al. 2025, arXiv 2502.14786, §2; docs/methods.md §5) on web
image-text tar shards: 256 px with patch 16 and 64 text tokens of Gemma's 256k vocabulary, global batch 32k for 40B
examples, Adam at lr 1e-3 with 20k warmup steps, cosine decay and gradient clipping at norm 1. The sigmoid loss and
LocCa's decoder (weight 1; half the captions predicted in parallel; half the text tower's blocks) train from the
start, the decoder on captioning only (the data below has no regions; see there); SILC's self-distillation (weight
1) and TIPS's masked prediction (0.25, half the patches masked) join at 80% of the steps, both times the size factor
0.25 of B, with one global and 8 local views against an EMA teacher that starts there as a copy of the student.

Set by us where the paper is silent or the code differs (docs/methods.md §5):
  - Weight decay: the paper's decoupled 1e-4 is big_vision's, which adds 1e-4 x the schedule (not x the lr) to the
    update; optax's AdamW scales its decay by the lr, so weight_decay = 1e-4 / 1e-3 = 0.1 is the same decay.
  - Adam's betas and epsilon: not given; the base config's (0.9, 0.98, 1e-6).
  - SILC's and TIPS's heads, temperatures and EMA momentum: not given (the paper refers to SILC); the objective's
    defaults (DINO's head 2048/256/65536, temperatures 0.1 and 0.02 from COSMOS's SILC grid, momentum 0.999 fixed).
  - The local crops' size (96 px, DINO's) and scales, whether masking is random (it is here) and whether the two
    heads are shared (not here): not given.
  - Box coordinates: LocCa writes them as text; here 256 coordinate tokens per axis (one per pixel at 256 px).
  - Whether the learning-rate schedule changes at the 80% switch: not said; here the one cosine continues.
  - The data: WebLI is not public, and its regions come from an open-vocabulary detector run over n-grams of the
    alt-text, which we do not ship. Webdataset tars carry no regions (docs/data.md), so the location tasks
    (referring expression, grounded caption) would train nothing here, at 44% of the forward FLOPs, and validation
    refuses them on webdataset: this config runs captioning only. For the paper's three tasks, convert shards whose
    records hold `regions` to ArrayRecord and add --config.data.name=array_record
    --config.objective.decoder_tasks="('cap','aref','gcap')".
  - Not included: ACID's data-curation fine-tune of the B models (§2.5) and the fixed-resolution branches.
  - NaFlex (§2.4.2) as `get_config('naflex')` (--config=configs/siglip2_webli.py:naflex): from 90% of the steps each
    batch is NaFlex patches at a budget drawn per batch from (128, 256, 576, 784, 1024), without self-distillation
    and masked prediction, and zero-shot and retrieval are also evaluated at 256, 576 and 1024 patches; the model
    is a NaFlex model (model.vision.naflex, 256 patches by default in `vlp_jax.load(...).encode_image`). It is one
    run, not the paper's restart from the 90% checkpoint with the last 10% stretched 3.75x, and every length trains
    at the full batch (the paper halves the batch and doubles the steps at 1024): 5 train-step programs.

python -m vlp_jax.main --config=configs/siglip2_webli.py --workdir=gs://bucket/siglip2_b16 \
    --config.data.path='webli=/data/web/{00000..99999}.tar' \
    --config.model.text.tokenizer_path=/models/gemma/tokenizer.model --config.mesh.fsdp=<devices per replica>

(the tokenizer path is required; the paper trains with FSDP on up to 2048 TPUv5e chips)
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config
from vlp_jax.errors import ConfigError
from vlp_jax.evalsets import PAPER_EVAL_SETS

BATCH_SIZE = 32_768
EXAMPLES_SEEN = 40_000_000_000  # §2.1: 40B examples


VARIANTS = ('naflex',)  # get_config's argument
NAFLEX_EVAL_BUDGETS = (256, 576, 1024)


def get_config(variant=None):
  if variant is not None and variant not in VARIANTS:
    raise ConfigError(f'--config=configs/siglip2_webli.py:{variant}: no such variant; valid choices: '
                      f'{list(VARIANTS)}')
  config = base_config()
  config.seed = 0
  config.batch_size = BATCH_SIZE
  config.total_steps = math.ceil(EXAMPLES_SEEN / BATCH_SIZE)  # 1,220,704
  config.model = models.preset('ViT-B-16-SigLIP-256')
  config.model.text.update(tokenizer='gemma', vocab_size=256_000, tokenizer_path='')  # the path: the user's
  config.model.dtype = 'bfloat16'
  config.objective.name = 'siglip2'
  config.objective.update(
      init_logit_bias=-10.0, sigmoid_weight=1.0, distill_weight=1.0, masked_weight=0.25, size_factor=0.25,
      distill_start_fraction=0.8, num_local_crops=8, local_crop_size=96, mask_ratio=0.5,
      decoder_weight=1.0, decoder_tasks=('cap',), decoder_parallel_prob=0.5, decoder_box_bins=256,
      decoder_length=0, decoder_layers=0, decoder_loss_on_condition=True)
  config.data.name = 'webdataset'
  config.data.path = ''  # the tar shards: --config.data.path='name=/data/web/{00000..99999}.tar'
  config.data.num_workers = 16  # multi-crop augmentation is host-heavy
  config.optim.update(lr=1e-3, warmup_init_lr=0.0, warmup_steps=20_000, schedule='cosine', end_factor=0.0,
                      weight_decay=1e-4 / 1e-3, grad_clip_norm=1.0)
  # SigLIP 2's evaluations (Tab. 1): ImageNet zero-shot, COCO and Flickr30k retrieval
  config.eval.datasets = PAPER_EVAL_SETS
  config.eval.tasks = ('zeroshot', 'retrieval')
  config.eval.every_steps = 50_000
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 2000
  config.log_every_steps = 100
  if variant == 'naflex':  # the paper's sequence lengths are config.data.naflex's defaults
    config.model.vision.update(naflex=True, max_patches=256)  # encode_image: NaFlex, 256 patches by default
    config.objective.naflex_start_fraction = 0.9
    config.eval.naflex_max_patches = NAFLEX_EVAL_BUDGETS
  return config
