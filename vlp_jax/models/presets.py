"""Model presets by name (open_clip's names): an embed dim, an image tower's options (its own file, towers.py) and
the text tower's (`text_options`). A config picks one with `config.model = models.preset('ViT-B-32')`; every field
can then be overridden from the command line (`--config.model.vision.layers=6`)."""
from __future__ import annotations

import math

import ml_collections

from vlp_jax.models.clip_model import EMBEDDING_GRADS
from vlp_jax.models.resnet import ResNetTower
from vlp_jax.models.siglip_vit import SiglipViTTower
from vlp_jax.models.towers import VISION_TOWERS, check_heads, vision_tower
from vlp_jax.models.vit import ViTTower
from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, SIGLIP_PREPROCESSING
from vlp_jax.data.text.tokenizer_factory import TOKENIZERS
from vlp_jax.registry import Registry, check_choice


def text_options(width: int = 512, layers: int = 12, heads: int = 8, context_length: int = 77, **options) -> dict:
  """A text tower: CLIP's (causal, pooled at the EOT token, CLIP's BPE) unless `options` say otherwise.

  causal: attention masks later tokens; pool: 'eot' (the position of the largest id, CLIP's EOT) or 'last' (the
  last position); proj_bias: a bias after `text_projection`; mlp_width: the blocks' MLP hidden width (0 = 4 *
  width); ln_eps: the LayerNorms' epsilon; tokenizer: 'clip_bpe' or 'sentencepiece', whose model file is read
  from tokenizer_path (data/text/tokenizer_factory.py); embedding_grad: how the token table's gradient is summed (a
  speed setting, clip.EMBEDDING_GRADS).
  """
  spec = dict(vocab_size=49408, context_length=context_length, width=width, layers=layers, heads=heads,
              causal=True, pool='eot', proj_bias=False, mlp_width=0, ln_eps=1e-5, tokenizer='clip_bpe',
              tokenizer_path='', embedding_grad='scatter')
  unknown = set(options) - set(spec)
  if unknown:
    raise TypeError(f'unknown text tower options {sorted(unknown)}')
  return {**spec, **options}


_TEXT_BASE = text_options()
TEXT_POOLING = ('eot', 'last')


def validate_text(text: ml_collections.ConfigDict) -> None:
  """Raise ValueError naming the key when an option of config.model.text is invalid."""
  check_choice('model.text.pool', text.pool, TEXT_POOLING)
  check_choice('model.text.embedding_grad', text.get('embedding_grad', 'scatter'), EMBEDDING_GRADS)
  check_choice('model.text.tokenizer', text.tokenizer, TOKENIZERS)
  check_heads('text', text.width, text.heads)
  if text.tokenizer == 'sentencepiece' and not text.tokenizer_path:
    raise ValueError("config.model.text.tokenizer='sentencepiece' needs config.model.text.tokenizer_path: the "
                     "spiece.model or tokenizer.json that came with the weights (nothing downloads at run time)")


def _siglip(image_size: int, patch_size: int, width: int, layers: int, heads: int, context_length: int,
            mlp_width: int = 0, text: dict | None = None) -> dict:
  """A SigLIP preset (transformers' SiglipModel, open_clip's '-SigLIP' models): tanh-GELU, LayerNorm eps 1e-6,
  the same width in both towers and the joint space, a bidirectional text tower pooled at its last position with a
  biased projection, SentencePiece tokens (32k vocabulary), logit scale log 10 and bias -10 at initialisation, and
  images resized to a square (no crop) and scaled to [-1, 1], as every SigLIP checkpoint was trained. `text`
  overrides text tower options (SigLIP 2's vocabulary and tokenizer, g's So400m-sized text tower)."""
  return dict(embed_dim=width, act='gelu_tanh', init_logit_scale=math.log(10.0), init_logit_bias=-10.0,
              preprocess=SIGLIP_PREPROCESSING.config(),
              vision=SiglipViTTower.options(image_size, patch_size, width, layers, heads, mlp_width=mlp_width),
              text=text_options(width, layers, heads, context_length, vocab_size=32000, causal=False, pool='last',
                                proj_bias=True, mlp_width=mlp_width, ln_eps=1e-6, tokenizer='sentencepiece')
              | (text or {}))


def _siglip2(image_size: int, patch_size: int, width: int, layers: int, heads: int, mlp_width: int = 0,
             text: dict | None = None) -> dict:
  """A SigLIP 2 preset (open_clip's '-SigLIP2' models, big_vision's fixed-resolution SigLIP 2 checkpoints): SigLIP's
  towers with Gemma's tokenizer (256k vocabulary) and 64 tokens; `text` as for `_siglip`."""
  return _siglip(image_size, patch_size, width, layers, heads, context_length=64, mlp_width=mlp_width,
                 text={'vocab_size': 256_000, 'tokenizer': 'gemma', **(text or {})})


# The So400m text tower that SigLIP 2's g-opt/16 image tower is paired with (projected to g-opt's 1536 wide space).
_SO400M_TEXT = dict(width=1152, layers=27, heads=16, mlp_width=4304)


_PRESETS = {
    # CPU-sized: trains on the embedded dataset in minutes.
    'tiny': dict(embed_dim=128, vision=ViTTower.options(32, 8, width=128, layers=4, heads=4),
                 text=text_options(128, 4, 4, context_length=32)),
    # ViT-S: SLIP's backbone (ViT-Small, 384 wide, 6 heads of 64) with open_clip's matching 384-wide text tower.
    'ViT-S-32': dict(embed_dim=384, vision=ViTTower.options(224, 32, width=384, layers=12, heads=6),
                     text=dict(_TEXT_BASE, width=384, heads=6)),
    'ViT-S-16': dict(embed_dim=384, vision=ViTTower.options(224, 16, width=384, layers=12, heads=6),
                     text=dict(_TEXT_BASE, width=384, heads=6)),
    'ViT-B-32': dict(embed_dim=512, vision=ViTTower.options(224, 32, width=768, layers=12, heads=12),
                     text=_TEXT_BASE),
    'ViT-B-16': dict(embed_dim=512, vision=ViTTower.options(224, 16, width=768, layers=12, heads=12),
                     text=_TEXT_BASE),
    'ViT-L-14': dict(embed_dim=768, vision=ViTTower.options(224, 14, width=1024, layers=24, heads=16),
                     text=dict(_TEXT_BASE, width=768, heads=12)),
    'ViT-L-16': dict(embed_dim=768, vision=ViTTower.options(224, 16, width=1024, layers=24, heads=16),
                     text=dict(_TEXT_BASE, width=768, heads=12)),
    # ViT-H: heads of 80 channels in the image tower (open_clip's head_width=80), 64 in the text tower.
    'ViT-H-14': dict(embed_dim=1024, vision=ViTTower.options(224, 14, width=1280, layers=32, heads=16),
                     text=dict(_TEXT_BASE, width=1024, heads=16, layers=24)),
    'RN50': dict(embed_dim=1024, vision=ResNetTower.options(224, (3, 4, 6, 3), width=64), text=_TEXT_BASE),
    # SigLIP (Zhai et al. 2023), at the image sizes and context lengths of the released checkpoints.
    'ViT-B-16-SigLIP': _siglip(224, 16, 768, 12, 12, context_length=64),
    'ViT-B-16-SigLIP-256': _siglip(256, 16, 768, 12, 12, context_length=64),
    'ViT-B-16-SigLIP-384': _siglip(384, 16, 768, 12, 12, context_length=64),
    'ViT-B-16-SigLIP-512': _siglip(512, 16, 768, 12, 12, context_length=64),
    'ViT-L-16-SigLIP-256': _siglip(256, 16, 1024, 24, 16, context_length=64),
    'ViT-L-16-SigLIP-384': _siglip(384, 16, 1024, 24, 16, context_length=64),
    # So400m: MLP width 4304 (open_clip's mlp_ratio 3.7362); at 384 px a 14 px patch grid is 27 x 27 (the conv
    # drops the last 6 pixels), as in the checkpoints.
    'ViT-SO400M-14-SigLIP': _siglip(224, 14, 1152, 27, 16, context_length=16, mlp_width=4304),
    'ViT-SO400M-14-SigLIP-384': _siglip(384, 14, 1152, 27, 16, context_length=64, mlp_width=4304),
    # SigLIP 2 (Tschannen et al. 2025) at the released fixed resolutions, named and shaped as open_clip's configs;
    # big_vision's So400m/14 at 384 px is open_clip's -378 (the same 27 x 27 grid).
    'ViT-B-32-SigLIP2-256': _siglip2(256, 32, 768, 12, 12),
    'ViT-B-16-SigLIP2': _siglip2(224, 16, 768, 12, 12),
    'ViT-B-16-SigLIP2-256': _siglip2(256, 16, 768, 12, 12),
    'ViT-B-16-SigLIP2-384': _siglip2(384, 16, 768, 12, 12),
    'ViT-B-16-SigLIP2-512': _siglip2(512, 16, 768, 12, 12),
    'ViT-L-16-SigLIP2-256': _siglip2(256, 16, 1024, 24, 16),
    'ViT-L-16-SigLIP2-384': _siglip2(384, 16, 1024, 24, 16),
    'ViT-L-16-SigLIP2-512': _siglip2(512, 16, 1024, 24, 16),
    'ViT-SO400M-14-SigLIP2': _siglip2(224, 14, 1152, 27, 16, mlp_width=4304),
    'ViT-SO400M-14-SigLIP2-378': _siglip2(378, 14, 1152, 27, 16, mlp_width=4304),
    'ViT-SO400M-16-SigLIP2-256': _siglip2(256, 16, 1152, 27, 16, mlp_width=4304),
    'ViT-SO400M-16-SigLIP2-384': _siglip2(384, 16, 1152, 27, 16, mlp_width=4304),
    'ViT-SO400M-16-SigLIP2-512': _siglip2(512, 16, 1152, 27, 16, mlp_width=4304),
    'ViT-gopt-16-SigLIP2-256': _siglip2(256, 16, 1536, 40, 16, text=_SO400M_TEXT),
    'ViT-gopt-16-SigLIP2-384': _siglip2(384, 16, 1536, 40, 16, text=_SO400M_TEXT),
}


PRESETS: Registry[dict] = Registry('model preset', 'model.name')
for _name, _spec in _PRESETS.items():
  PRESETS.add(_name, _spec)
  if _name != 'tiny' and 'SigLIP' not in _name:  # '<name>-quickgelu' variants, as in open_clip: OpenAI's activation
    PRESETS.add(f'{_name}-quickgelu', dict(_spec, act='quick_gelu'))


def preset(name: str, **overrides) -> ml_collections.ConfigDict:
  """The model config of a named preset: name, embed_dim, vision, text, act, dtype, init_logit_scale,
  init_logit_bias, preprocess.

  vision: the options of the image tower `vision.type` (its `default_config`, towers.py); text: `text_options`'s.
  """
  spec = PRESETS.get(name)
  cfg = ml_collections.ConfigDict({
      'name': name,
      'embed_dim': spec['embed_dim'],
      'vision': dict(spec['vision']),
      'text': dict(spec['text']),
      'act': spec.get('act', 'gelu'),  # 'quick_gelu' for OpenAI weights, 'gelu_tanh' for SigLIP's
      'dtype': 'float32',  # compute dtype ('bfloat16' for mixed precision); parameters and loss math stay float32
      'remat': False,  # recompute transformer-block activations in the backward pass to save memory
      'remat_policy': 'nothing_saveable',  # what remat keeps (transformer.REMAT_POLICIES)
      'scan_layers': False,  # run each tower's blocks as one scanned layer (transformer.BlockStack)
      # how self-attention runs: 'auto' (cuDNN's fused kernel on a GPU in bf16/fp16, else XLA's), 'xla', 'padded',
      # 'cudnn' or 'pallas' (TPU; transformer.ATTENTION_ROUTES); 'padded' and 'cudnn' pad the rows to a multiple of
      # attention_pad_multiple (0: as little as the installed jax's cuDNN rule needs, 2 or 1), 'pallas' to its
      # 128-row blocks
      'attention': 'auto',
      'attention_pad_multiple': 0,
      # a pooled tower's last block computes its pooled row only (False: every row, as open_clip; the same values)
      'pool_last_block': True,
      'init_logit_scale': spec.get('init_logit_scale', math.log(1 / 0.07)),
      # A learned logit bias in the model (SigLIP's, -10 at init) when not None; the siglip objective uses it.
      'init_logit_bias': spec.get('init_logit_bias', None),
      # How images become this model's input (data.image.image_ops.ImagePreprocessing: resize mode, filter, crop offset,
      # mean and std): the family's, saved with every checkpoint; evaluation, vlp_jax.load, embed and the exports
      # follow it.
      'preprocess': dict(spec.get('preprocess', OPENAI_CLIP_PREPROCESSING.config())),
  })
  cfg.update(overrides)
  return cfg


def complete(saved_model: dict | ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A model config saved by an earlier version (a checkpoint's `model`) with the keys added since at their
  defaults (those of `preset('tiny')`, and for `vision` those of its tower); saved values are kept."""
  saved = saved_model.to_dict() if isinstance(saved_model, ml_collections.ConfigDict) else dict(saved_model)
  merged = preset('tiny').to_dict()
  if saved.get('vision', {}).get('type') in VISION_TOWERS:
    merged['vision'] = vision_tower(saved['vision']['type']).default_config()
  for key, value in saved.items():
    merged[key] = {**merged[key], **value} if isinstance(merged.get(key), dict) and isinstance(value, dict) else value
  return ml_collections.ConfigDict(merged)
