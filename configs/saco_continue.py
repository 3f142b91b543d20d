"""Continue pre-training a converged CLIP with SaCo (the paper's Algorithm 2): CLIP loss + alpha * SaCo, no mimic,
AdamW, one epoch, constant lr 1e-6, from imported OpenAI weights (the paper uses LLaVA-595K as the data).

  python -m vlp_jax.weights import --format=openai --model=ViT-B-32 --input=ViT-B-32.safetensors --output=/ckpt/b32
  python -m vlp_jax.main --config=configs/saco_continue.py --workdir=/runs/saco_continue \
      --config.init.checkpoint=/ckpt/b32 --config.data.path=/data/llava595k/shards
"""
import os

from vlp_jax.config import from_file, with_term


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_continue.py'))
  return with_term(config, 'saco', alpha=5.0, beta=0.0, normalization='mean')
