"""CLIP ViT-B/32 pre-trained from scratch on CC3M with the settings of SaCo's supplementary (docs/methods.md §0):
32 epochs, global batch 2048, AdamW wd 0.2, lr warmed up linearly from 1e-4 to 1e-3 over one epoch, cosine to 0.

python -m vlp_jax.main --config=configs/clip_cc3m.py --workdir=gs://bucket/clip_cc3m \
    --config.data.path=/data/cc3m/shards --config.data.tfds_dir=/data/tfds --config.data.flickr30k_dir=/data/flickr30k

Evaluated each epoch as SaCo reports: ImageNet zero-shot and linear probe, COCO and Flickr30k retrieval (prepare them
as docs/usage.md says, or choose others with --config.eval.datasets).
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config
from vlp_jax.evalsets import PAPER_EVAL_SETS

CC3M_TRAIN_EXAMPLES = 2_800_000  # pairs in a typical CC3M download; set it to your shard count for exact epochs
EPOCHS = 32


def get_config():
  config = base_config()
  config.seed = 0
  config.batch_size = 2048
  steps_per_epoch = math.ceil(CC3M_TRAIN_EXAMPLES / config.batch_size)
  config.total_steps = EPOCHS * steps_per_epoch
  config.model = models.preset('ViT-B-32')
  config.model.dtype = 'bfloat16'  # mixed precision, as the reference code trains (docs/scaling.md)
  config.data.name = 'array_record'
  config.data.path = ''  # directory (or glob) of ArrayRecord shards in the vlp_jax record format
  config.data.num_workers = 8
  config.optim.update(lr=1e-3, warmup_init_lr=1e-4, warmup_steps=steps_per_epoch, schedule='cosine',
                      end_factor=0.0, b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.2)
  # SaCo's evaluations: ImageNet zero-shot and linear probe (its first probe_train_examples train images), COCO and
  # Flickr30k retrieval (config.data.tfds_dir, config.data.flickr30k_dir; docs/usage.md)
  config.eval.datasets = PAPER_EVAL_SETS
  config.eval.tasks = ('zeroshot', 'retrieval', 'linear_probe')
  config.eval.every_steps = steps_per_epoch
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 1000
  config.log_every_steps = 50
  return config
