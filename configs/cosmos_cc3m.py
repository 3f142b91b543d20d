"""COSMOS on CC3M with long synthetic captions (COSMOS paper, Sec. 4 and C.1): ViT-B/16, batch 1024, 32 epochs,
AdamW (0.9, 0.98, 1e-8), lr 5e-4 with 2000 warmup steps and cosine decay, wd 0.5, EMA momentum 0.999, 2 global
(224px, scale 0.4-1) + 6 local (96px, scale 0.05-0.4) image crops, 2 global (1-5 sentences) + 6 local (1 sentence)
text crops. The records' `long_caption` field must hold the synthetic captions (DreamLIP's for CC3M: the authors'
pool holds its 3 short and 3 long ones), whose sentences form the text-crop pool.

The raw (alt-text) caption is one more sentence of that pool (`caption_in_text_crops=True`). This follows the
authors' code (github.com/ExplainableML/cosmos, `sample_dict`, mode `textcrop`: the pool is DreamLIP's raw caption
plus its short and long synthetic captions); the paper's text (Sec. 3.1) samples from the long synthetic caption only.
Every text crop, global or local, is drawn from that pool as the paper and that code draw it (data/text/text_crops.py).

python -m vlp_jax.main --config=configs/cosmos_cc3m.py --workdir=/runs/cosmos_cc3m --config.data.path=/data/cc3m \
    --config.data.tfds_dir=/data/tfds --config.data.flickr30k_dir=/data/flickr30k
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config
from vlp_jax.evalsets import PAPER_EVAL_SETS

CC3M_TRAIN_EXAMPLES = 2_823_019  # the paper's copy (Tab. 6; the authors' --train-num-samples); set it to your shard count
EPOCHS = 32


def get_config():
  config = base_config()
  config.seed = 0
  config.batch_size = 1024
  config.total_steps = EPOCHS * math.ceil(CC3M_TRAIN_EXAMPLES / config.batch_size)
  config.model = models.preset('ViT-B-16')
  config.model.dtype = 'bfloat16'  # mixed precision, as the reference code trains (docs/scaling.md)
  config.objective.name = 'cosmos'
  config.objective.ema_momentum = 0.999
  config.objective.num_local_crops = 6
  config.objective.num_local_texts = 6
  config.objective.local_crop_size = 96
  config.objective.caption_in_text_crops = True  # the authors' code (see the docstring)
  config.data.name = 'array_record'
  config.data.num_workers = 16  # multi-crop augmentation is host-heavy
  config.optim.update(lr=5e-4, warmup_init_lr=0.0, warmup_steps=2000, schedule='cosine', end_factor=0.0,
                      b1=0.9, b2=0.98, eps=1e-8, weight_decay=0.5)
  # COSMOS's evaluations (Tab. 1-2): COCO and Flickr30k retrieval, ImageNet zero-shot
  config.eval.datasets = PAPER_EVAL_SETS
  config.eval.tasks = ('zeroshot', 'retrieval')
  config.eval.every_steps = math.ceil(CC3M_TRAIN_EXAMPLES / config.batch_size)
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 1000
  config.log_every_steps = 50
  return config
