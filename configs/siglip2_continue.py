"""Continue training a released SigLIP 2 (imported from Hugging Face) with SigLIP 2's own recipe: the sigmoid loss,
LocCa's decoder and, from the first step, SILC's self-distillation and TIPS's masked prediction (the released
models have been through the paper's 80% switch). From the checkpoint: the image tower with its attention-pooling
(MAP) head, the text tower, the logit scale and bias. Fresh: the decoder (the release has none), the two
self-distillation heads and the mask token; the EMA teacher starts as the loaded image tower with the fresh heads.
The log says what was loaded and what is fresh. One epoch at a low constant learning rate, as configs/clip_continue.py
(SaCo's Algorithm 2 settings; the paper gives none for continuing).

  python -m vlp_jax.weights import --format=hf --input=siglip2-base-patch16-256/ --output=/ckpt/siglip2-b16
  python -m vlp_jax.main --config=configs/siglip2_continue.py --workdir=/runs/siglip2_continue \
      --config.init.checkpoint=/ckpt/siglip2-b16 --config.data.path='web=/data/web/{00000..00059}.tar' \
      --config.model.text.tokenizer_path=siglip2-base-patch16-256/tokenizer.model

At another resolution or patch size (docs/usage.md, "Fine-tuning at another shape"), set it and the checkpoint's
position and patch embeddings are resized: --config.model.vision.image_size=384 (or patch_size=14, SigLIP 2's /14).
Another model: name its preset after the file (`--config=configs/siglip2_continue.py:ViT-L-16-SigLIP-256`).
"""
import math
import os

from vlp_jax import models
from vlp_jax.config import from_file

TRAIN_EXAMPLES = 595_000  # set it to your shard count (LLaVA-595K's size, as configs/clip_continue.py)
EPOCHS = 1


def get_config(model: str = 'ViT-B-16-SigLIP-256'):
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'siglip2_webli.py'))
  config.model = models.preset(model)
  config.model.text.update(tokenizer='gemma', vocab_size=256_000, tokenizer_path='')  # the path: the user's
  config.model.dtype = 'bfloat16'
  config.batch_size = 2048
  config.total_steps = EPOCHS * math.ceil(TRAIN_EXAMPLES / config.batch_size)
  config.init.require_checkpoint = True
  config.objective.distill_start_fraction = 0.0
  config.data.path = ''
  config.optim.update(lr=1e-6, warmup_init_lr=1e-6, warmup_steps=0, schedule='constant', grad_clip_norm=1.0)
  config.eval.every_steps = config.total_steps
  config.checkpoint.every_steps = 100
  config.log_every_steps = 10
  return config
