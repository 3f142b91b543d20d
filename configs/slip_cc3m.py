"""SLIP ViT-B/16 pre-trained from scratch on CC3M with the paper's recipe (docs/methods.md §2): AdamW betas
(0.9, 0.98), eps 1e-8, lr 3e-3, wd 0.1, global batch 4096, 1 warmup epoch then cosine; the SimCLR head
4096-4096-256, c = 1, tau = 0.1; the CLIP view cropped with scale (0.5, 1).

Epochs: SLIP's main setting is YFCC15M for 25 epochs; on the smaller CC3M the paper trains 40 epochs to reduce
overfitting (SLIP supplementary, section 3). Set DATASET = 'yfcc15m' below for the YFCC15M setting (14.6M pairs,
25 epochs, about 3,500 warmup steps) and point config.data.path at those shards.
The warmup starts at 1e-6 and the cosine ends at 1e-5, the defaults of SLIP's official code.

python -m vlp_jax.main --config=configs/slip_cc3m.py --workdir=gs://bucket/slip_cc3m \
    --config.data.path=/data/cc3m/shards --config.data.tfds_dir=/data/tfds --config.data.flickr30k_dir=/data/flickr30k
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config
from vlp_jax.evalsets import PAPER_EVAL_SETS

CC3M_TRAIN_EXAMPLES = 2_800_000  # pairs in a typical CC3M download; set it to your shard count for exact epochs
YFCC15M_TRAIN_EXAMPLES = 14_600_000  # SLIP's YFCC15M
SETTINGS = {  # dataset: (training pairs, epochs)
    'cc3m': (CC3M_TRAIN_EXAMPLES, 40),
    'yfcc15m': (YFCC15M_TRAIN_EXAMPLES, 25),
}
DATASET = 'cc3m'
LR = 3e-3


def get_config():
  examples, epochs = SETTINGS[DATASET]
  config = base_config()
  config.seed = 0
  config.batch_size = 4096
  steps_per_epoch = math.ceil(examples / config.batch_size)
  config.total_steps = epochs * steps_per_epoch
  config.model = models.preset('ViT-B-16')
  config.model.dtype = 'bfloat16'  # mixed precision, as the reference code trains (docs/scaling.md)
  config.objective.name = 'slip'
  config.objective.ssl_scale = 1.0
  config.objective.ssl_temperature = 0.1
  config.objective.head_mlp_dim = 4096
  config.objective.head_out_dim = 256
  config.objective.clip_crop_scale = (0.5, 1.0)
  config.data.name = 'array_record'
  config.data.path = ''  # directory (or glob) of ArrayRecord shards in the vlp_jax record format
  config.data.num_workers = 16  # three augmented views per example
  config.optim.update(lr=LR, warmup_init_lr=1e-6, warmup_steps=steps_per_epoch, schedule='cosine',
                      end_factor=1e-5 / LR, b1=0.9, b2=0.98, eps=1e-8, weight_decay=0.1)
  # SLIP's evaluations: ImageNet zero-shot and linear probe (a capped part of its train split); COCO and Flickr30k
  # retrieval beside them
  config.eval.datasets = PAPER_EVAL_SETS
  config.eval.tasks = ('zeroshot', 'retrieval', 'linear_probe')
  config.eval.every_steps = steps_per_epoch
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 1000
  config.log_every_steps = 50
  return config
