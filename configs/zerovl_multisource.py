"""ZeroVL's setting (docs/methods.md §4, ZeroVL appendix A.9) on your own multi-source data: debiased sampling over
the sources, coin-flipping mixup (alpha 0.1), text augmentation (20% of tokens: 50% masked, 10% replaced, 40%
deleted), a constant temperature of 0.02, AdamW (0.9, 0.98, 1e-6) with wd 1e-3, lr 1e-4 with cosine decay to 0.1x,
global batch 16384 for 20 epochs.

The paper's batch of 16384 is reached with decoupled gradient accumulation in micro-batches of 1024 (the paper's
per-GPU memory budget), which gives the exact gradient of the whole batch.

Data: ArrayRecord shards from `python -m vlp_jax.convert`, one folder per source, listed in config.data.path
(comma-separated, or a glob such as '/data/*/train-*.array_record'); each shard holds examples of one source (the
record field `source`, e.g. sbu, vg, cc3m, cc12m), read from the shards' records. The paper's image encoder is an
ImageNet-pretrained ViT-B/16 and its text encoder BERT-Base (max length 25); here both towers are CLIP's ViT-B/16
and text transformer (context 77), trained from scratch.

python -m vlp_jax.main --config=configs/zerovl_multisource.py --workdir=gs://bucket/zerovl \
    --config.data.path=/data/sbu,/data/vg,/data/cc3m,/data/cc12m
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config

TRAIN_EXAMPLES = 14_230_000  # the paper's SBU + VG + CC3M + CC12M; set it to your data for exact epochs
EPOCHS = 20


def get_config():
  config = base_config()
  config.seed = 0
  config.batch_size = 16384
  steps_per_epoch = math.ceil(TRAIN_EXAMPLES / config.batch_size)
  config.total_steps = EPOCHS * steps_per_epoch
  config.model = models.preset('ViT-B-16')
  config.data.name = 'array_record'
  config.data.path = ''  # comma-separated folders (or globs) of single-source ArrayRecord shards
  config.data.mixing = 'single_source'
  config.data.num_workers = 16
  config.objective.name = 'zerovl'
  config.objective.mixup = True
  config.objective.mixup_alpha = 0.1
  config.objective.text_augment = True
  config.objective.text_augment_prob = 0.2
  config.objective.text_mask_prob = 0.5
  config.objective.text_replace_prob = 0.1
  config.objective.text_delete_prob = 0.4
  config.objective.fixed_temperature = 0.02
  config.accumulation.update(mode='decoupled', micro_batch_size=1024)
  # The appendix gives no warmup; a short one (1/4 epoch) keeps the first steps of a large batch stable.
  config.optim.update(lr=1e-4, warmup_init_lr=0.0, warmup_steps=steps_per_epoch // 4, schedule='cosine',
                      end_factor=0.1, b1=0.9, b2=0.98, eps=1e-6, weight_decay=1e-3)
  config.eval.every_steps = steps_per_epoch
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 500
  config.log_every_steps = 50
  return config
