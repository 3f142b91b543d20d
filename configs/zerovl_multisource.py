"""ZeroVL's setting (docs/methods.md §4, ZeroVL appendix A.9) on your own multi-source data: debiased sampling over
the sources, coin-flipping mixup (alpha 0.1), text augmentation (20% of the words: 50% masked, 10% replaced, 40%
deleted), images randomly cropped (area 60-100%, aspect 3/4-4/3) and AutoAugmented (ImageNet policy) for training
only, the trainable temperature initialised at 0.02 ("the trainable temperature of contrastive loss is initialized
to 0.02"), AdamW (0.9, 0.98, 1e-6) with wd 1e-3, lr 1e-4 with cosine decay to 0.1x (the paper's minimum 1e-5),
global batch 16384 for 20 epochs. (The authors' released configs keep the temperature constant at 0.02:
--config.objective.fixed_temperature=0.02.)

The paper's batch of 16384 is reached with decoupled gradient accumulation in micro-batches of 1024 (the paper's
per-GPU memory budget), which gives the exact gradient of the whole batch.

Data: ArrayRecord shards from `python -m vlp_jax.convert`, one folder per source, listed in config.data.path
(comma-separated, or a glob such as '/data/*/train-*.array_record'); each shard holds examples of one source (the
record field `source`, e.g. sbu, vg, cc3m, cc12m), read from the shards' records. The paper's image encoder is an
ImageNet-pretrained ViT-B/16 and its text encoder BERT-Base (max length 25); here both towers are CLIP's ViT-B/16
and text transformer (context 77), trained from scratch. Evaluation images are resized and centre-cropped, never
augmented (the eval sets do not use the training views).

python -m vlp_jax.main --config=configs/zerovl_multisource.py --workdir=gs://bucket/zerovl \
    --config.data.path=/data/sbu,/data/vg,/data/cc3m,/data/cc12m --config.data.tfds_dir=/data/tfds \
    --config.data.flickr30k_dir=/data/flickr30k
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config
from vlp_jax.evalsets import PAPER_EVAL_SETS

TRAIN_EXAMPLES = 14_230_000  # the paper's SBU + VG + CC3M + CC12M; set it to your data for exact epochs
EPOCHS = 20


def get_config():
  config = base_config()
  config.seed = 0
  config.batch_size = 16384
  steps_per_epoch = math.ceil(TRAIN_EXAMPLES / config.batch_size)
  config.total_steps = EPOCHS * steps_per_epoch
  config.model = models.preset('ViT-B-16')
  config.model.dtype = 'bfloat16'  # mixed precision, as the reference code trains (docs/scaling.md)
  config.data.name = 'array_record'
  config.data.path = ''  # comma-separated folders (or globs) of single-source ArrayRecord shards
  config.data.mixing = 'single_source'
  config.data.num_workers = 16
  # A.9: "randomly cropped to a rectangular region with aspect ratio sampled in [3/4,4/3] and area sampled in
  # [60%, 100%]" (random_resized_crop's default ratio), then "AutoAugment after crop operation", ImageNet policy.
  config.data.crop_scale = (0.6, 1.0)
  config.data.augment = 'autoaugment'
  config.objective.name = 'zerovl'
  config.objective.mixup = True
  config.objective.mixup_alpha = 0.1
  config.objective.text_augment = True
  config.objective.text_augment_prob = 0.2
  config.objective.text_mask_prob = 0.5
  config.objective.text_replace_prob = 0.1
  config.objective.text_delete_prob = 0.4
  # The paper's temperature: trainable, initialised at 0.02 (logit scale 50).
  config.objective.fixed_temperature = 0.0
  config.model.init_logit_scale = math.log(1 / 0.02)
  config.accumulation.update(mode='decoupled', micro_batch_size=1024)
  # The appendix gives no warmup; the authors' code warms up linearly over 2.5% of the steps (half an epoch here).
  config.optim.update(lr=1e-4, warmup_init_lr=0.0, warmup_steps=round(0.025 * config.total_steps), schedule='cosine',
                      end_factor=0.1, b1=0.9, b2=0.98, eps=1e-6, weight_decay=1e-3)
  # ZeroVL's evaluations: COCO and Flickr30k retrieval; ImageNet zero-shot beside them
  config.eval.datasets = PAPER_EVAL_SETS
  config.eval.tasks = ('zeroshot', 'retrieval')
  config.eval.every_steps = steps_per_epoch
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 500
  config.log_every_steps = 50
  return config
