"""Continue pre-training a converged CLIP (e.g. OpenAI's ViT-B/32) with the CLIP loss, with the settings of SaCo's
Algorithm 2: AdamW, one epoch, constant learning rate 1e-6, no warmup. (The SaCo term is added by configs/saco_*.)

  python -m vlp_jax.weights import --format=openai --model=ViT-B-32 --input=ViT-B-32.safetensors --output=/ckpt/b32
  python -m vlp_jax.main --config=configs/clip_continue.py --workdir=/runs/continue \
      --config.init.checkpoint=/ckpt/b32 --config.data.path=/data/llava595k/shards

Evaluated at the end as SaCo reports (ImageNet zero-shot, COCO and Flickr30k retrieval): add
--config.data.tfds_dir=/data/tfds --config.data.flickr30k_dir=/data/flickr30k (docs/usage.md).

Another model: name its preset after the file (`--config=configs/clip_continue.py:ViT-B-16-SigLIP`); the
checkpoint must fit it (config.init.checkpoint names every mismatch). From SigLIP weights (docs/usage.md, "SigLIP
weights"), the SentencePiece file that came with them is the tokenizer, and the sigmoid loss is their own objective:

  python -m vlp_jax.weights import --format=hf --input=siglip-base-patch16-224/ --output=/ckpt/siglip-b16
  python -m vlp_jax.main --config=configs/clip_continue.py:ViT-B-16-SigLIP --workdir=/runs/continue \
      --config.init.checkpoint=/ckpt/siglip-b16 --config.data.path=/data/llava595k/shards \
      --config.model.text.tokenizer_path=siglip-base-patch16-224/spiece.model --config.objective.name=siglip
"""
import math

from vlp_jax import models
from vlp_jax.config import base_config
from vlp_jax.evalsets import PAPER_EVAL_SETS

TRAIN_EXAMPLES = 595_000  # LLaVA-595K, the dataset SaCo continues pre-training on; set it to your shard count
EPOCHS = 1


def get_config(model: str = 'ViT-B-32-quickgelu'):
  config = base_config()
  config.seed = 0
  config.batch_size = 2048
  config.total_steps = EPOCHS * math.ceil(TRAIN_EXAMPLES / config.batch_size)
  config.model = models.preset(model)  # the default: OpenAI's ViT-B/32, whose towers use QuickGELU
  if config.model.preprocess.resize == 'shorter_side_crop':
    # OpenAI's and open_clip's CLIP weights see torchvision's centre crop, as `weights import` records it
    # (config.init.checkpoint refuses a checkpoint whose preprocessing differs, naming the settings to give)
    config.model.preprocess.crop_offset = 'round'
  config.model.dtype = 'bfloat16'  # mixed precision, as the reference code trains (docs/scaling.md)
  config.init.require_checkpoint = True
  config.data.name = 'array_record'
  config.data.num_workers = 8
  config.optim.update(lr=1e-6, warmup_init_lr=1e-6, warmup_steps=0, schedule='constant', weight_decay=0.2,
                      b1=0.9, b2=0.98, eps=1e-6)
  # SaCo's continued pre-training is evaluated zero-shot: ImageNet, COCO and Flickr30k retrieval
  config.eval.datasets = PAPER_EVAL_SETS
  config.eval.tasks = ('zeroshot', 'retrieval')
  config.eval.every_steps = config.total_steps
  config.eval.batch_size = 1024
  config.checkpoint.every_steps = 100
  config.log_every_steps = 10
  return config
