"""Continue pre-training a converged CLIP with SaCo (the paper's Algorithm 2): CLIP loss + alpha * SaCo, no mimic,
AdamW, one epoch, constant lr 1e-6, from imported OpenAI weights (the paper uses LLaVA-595K as the data).

  python -m vlp_jax.weights import --format=openai --model=ViT-B-32 --input=ViT-B-32.safetensors --output=/ckpt/b32
  python -m vlp_jax.main --config=configs/saco_continue.py --workdir=/runs/saco_continue \
      --config.init.checkpoint=/ckpt/b32 --config.data.path=/data/llava595k/shards

From a SigLIP checkpoint (the setting where users bring their own converged weights today): import the
transformers folder (the model is read from its config.json, its spiece.model recorded as the tokenizer), name the
preset after the config file, and give the SentencePiece file. `--config.objective.name=siglip` puts SaCo beside
SigLIP's own sigmoid loss (its learned bias comes with the weights) instead of the paper's CLIP loss:

  python -m vlp_jax.weights import --format=hf --input=siglip-base-patch16-224/ --output=/ckpt/siglip-b16
  python -m vlp_jax.main --config=configs/saco_continue.py:ViT-B-16-SigLIP --workdir=/runs/saco_siglip \
      --config.init.checkpoint=/ckpt/siglip-b16 --config.data.path=/data/llava595k/shards \
      --config.model.text.tokenizer_path=siglip-base-patch16-224/spiece.model --config.objective.name=siglip

Evaluated as configs/clip_continue.py says (add --config.data.tfds_dir and --config.data.flickr30k_dir).

open_clip's SigLIP files import the same way (`--format=open_clip --model=ViT-B-16-SigLIP`).
"""
import os

from vlp_jax.config import from_file, with_term


def get_config(model: str = 'ViT-B-32-quickgelu'):
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_continue.py'), model)
  return with_term(config, 'saco', alpha=5.0, beta=0.0, normalization='mean')
