"""COSMOS: cross-modality self-distillation with an EMA teacher (COSMOS paper, Sec. 3 and Algorithm 1).

Per example the views hold 2 global + N local image crops and 2 global + M local text crops (data/text/text_crops.py:
sentences of the long caption; optionally the short caption is one more sentence of the pool, `caption_in_text_crops`,
as the authors' code does, and the first global text crop, `caption_first_global`, in neither the paper nor the
authors' code: an option kept for diagnostics, off in every shipped config).
The student embeds every crop; the teacher, an EMA of the student's towers kept in the model state, embeds the
global crops only. The student's cross-attention modules give
  h_I = cls + CrossAttn(q=cls, kv=tokens of the first global text crop)
  h_T = eot + CrossAttn(q=eot, kv=patch tokens of the first global image crop), then L2-normalised, and
  L_clip   = mean over (global image crop, any text crop) of sym_nce(cls, eot)        (the CLIP logit scale)
  L_cosmos = mean over (student crop, teacher global crop) of
             [sym_nce(h_I, CLS_t) + sym_nce(h_I, EOT_t) + sym_nce(h_T, CLS_t) + sym_nce(h_T, EOT_t)] / 4
             (its own learnable logit scale `cosmos_logit_scale`), and L = L_clip + L_cosmos.
sym_nce is the symmetric InfoNCE of `clip_infonce`. Padding tokens after the EOT are masked out of the keys.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np

from vlp_jax.data.image import device_augment, transforms
from vlp_jax.data.loading.pipeline import passthrough
from vlp_jax.data.text.text_crops import long_caption_need, text_crops
from vlp_jax.data.text.tokenizer_factory import CLIP_BPE, cached_tokenizer, require_clip_bpe, tokenizer_options
from vlp_jax.losses.contrastive import l2_normalize, pairwise_sym_nce
from vlp_jax.models.cross_attention import CrossAttention
from vlp_jax.objectives.base import (IMAGE_TOWER, OBJECTIVES, TEXT_TOWER, Objective, ema_update, tower_rngs,
                                     tower_variables)

_OWN_PARAMS = ('cosmos_xattn_image', 'cosmos_xattn_text', 'cosmos_logit_scale')


def _flat(keys: jax.Array | None) -> jax.Array | None:
  """[B, C] keys -> [B * C], in the order of crops [B, C, ...] reshaped to [B * C, ...]."""
  return None if keys is None else keys.reshape(-1)


def _split_crops(keys: jax.Array | None, num_global: int) -> tuple[jax.Array | None, jax.Array | None]:
  """[B, G + N] keys -> ([B, G] of the global crops, [B, N] of the local ones); None -> (None, None)."""
  return (None, None) if keys is None else (keys[:, :num_global], keys[:, num_global:])


def tower_params(params: dict) -> dict:
  """The parameters the teacher copies: everything but COSMOS's own modules and logit scale."""
  return {k: v for k, v in params.items() if k not in _OWN_PARAMS}


@dataclasses.dataclass
class CosmosViews(grain.transforms.RandomMap):
  """Multi-crop image views (DINO recipe) and text crops, independently sampled.

  -> {'global_images': [G, S, S, 3], 'local_images': [N, s, s, 3] uint8 (normalised in the train step),
      'texts': [G, L] int32 global text crops, 'local_texts': [M, l] int32 one-sentence crops, 'label', ...}
  The crops are tokenised by the model's tokenizer (config.model.text's `tokenizer` and `tokenizer_path`).
  """
  image_size: int
  local_size: int
  context_length: int
  local_context_length: int
  num_global: int = 2
  num_local: int = 6
  num_text_local: int = 6
  global_scale: tuple[float, float] = (0.4, 1.0)
  local_scale: tuple[float, float] = (0.05, 0.4)
  caption_in_text_crops: bool = False
  caption_first_global: bool = False
  text_crop_max_sentences: int = 5
  color_jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.2, 0.1)  # brightness, contrast, saturation, hue
  grayscale_prob: float = 0.2
  tokenizer: str = CLIP_BPE
  tokenizer_path: str = ''

  def __post_init__(self):
    cached_tokenizer(self.tokenizer, self.tokenizer_path)  # a bad tokenizer setting fails here, not in a worker

  def _augment(self, crop: np.ndarray, rng: np.random.Generator, blur_p: float, solarize_p: float) -> np.ndarray:
    return transforms.dino_augment(crop, rng, self.color_jitter, self.grayscale_prob, blur_p, solarize_p)

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    images = self.image_views(example['image'], rng)
    return {**images, **self.text_views(example, rng), **passthrough(example)}

  def image_views(self, image: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """[H, W, 3] uint8 -> {'global_images': [G, S, S, 3], 'local_images': [N, s, s, 3]} uint8."""
    # DINO: the first global view is always blurred, the second (and any after it) rarely but may be solarised.
    global_views = [self._augment(transforms.random_resized_crop(image, self.image_size, self.global_scale, rng),
                                  rng, *transforms.DINO_GLOBAL_VIEWS[min(i, 1)])
                    for i in range(self.num_global)]
    local_views = [self._augment(transforms.random_resized_crop(image, self.local_size, self.local_scale, rng),
                                 rng, blur_p=0.5, solarize_p=0.0) for _ in range(self.num_local)]
    return {'global_images': np.stack(global_views), 'local_images': np.stack(local_views)}

  def text_views(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """-> {'texts': [G, L], 'local_texts': [M, l]} int32 token rows of the text crops, drawn after the images."""
    crops = text_crops(example.get('long_caption', ''), example['caption'], rng, self.num_global,
                       self.num_text_local, include_caption=self.caption_in_text_crops,
                       caption_first=self.caption_first_global, max_sentences=self.text_crop_max_sentences)
    tokenize = cached_tokenizer(self.tokenizer, self.tokenizer_path)
    return {'texts': tokenize(crops[:self.num_global], context_length=self.context_length),
            'local_texts': tokenize(crops[self.num_global:], context_length=self.local_context_length)}


@dataclasses.dataclass
class CosmosDeviceViews(CosmosViews):
  """CosmosViews with the image crops left to the train step (config.data.augment_on='device'): -> the text crops
  and passthrough fields as CosmosViews, and {device_augment.SOURCE_KEY: [R, R, 3] uint8 (the decoded image
  squashed to `source_size`), 'global_images_params': [G, P], 'local_images_params': [N, P] float32}, drawn from
  the generator exactly as CosmosViews draws its crops (so the text crops are the same too);
  `Objective.prepared` renders 'global_images' and 'local_images' from them."""
  source_size: int = 256

  def image_views(self, image: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    height, width = image.shape[:2]
    draw = functools.partial(device_augment.dino_view_params, height, width, jitter=self.color_jitter,
                             grayscale_p=self.grayscale_prob)
    global_params = [draw(self.global_scale, rng, blur_p=blur_p, solarize_p=solarize_p)
                     for blur_p, solarize_p in (transforms.DINO_GLOBAL_VIEWS[min(i, 1)]
                                                for i in range(self.num_global))]
    local_params = [draw(self.local_scale, rng, blur_p=0.5, solarize_p=0.0) for _ in range(self.num_local)]
    return {device_augment.SOURCE_KEY: device_augment.source_image(image, self.source_size),
            'global_images' + device_augment.PARAMS_SUFFIX: np.stack(global_params),
            'local_images' + device_augment.PARAMS_SUFFIX: np.stack(local_params)}


@OBJECTIVES.register('cosmos')
class CosmosObjective(Objective):

  @classmethod
  def default_config(cls):
    return {**super().default_config(), 'name': cls.name,
            'ema_momentum': 0.999,  # 0.999 at batch 1k (CC3M), 0.99 at 4k
            'num_local_crops': 6, 'num_local_texts': 6, 'local_crop_size': 96,
            # Local text crops are single sentences: a shorter context saves text-tower compute. 0 = the model's.
            'local_text_context_length': 0,
            'global_crop_scale': (0.4, 1.0), 'local_crop_scale': (0.05, 0.4),
            'cross_attention_heads': 8, 'zero_init_cross_attention': False,
            # The short caption as one more sentence of the text-crop pool (the authors' code, whose pool holds
            # DreamLIP's raw caption beside the synthetic ones; the paper's text crops the long caption only).
            'caption_in_text_crops': False,
            # The short caption as the first global text crop of every example: L_clip then holds CLIP's own pairs
            # (caption, global image crop), and h_I attends to the caption's tokens (in neither the paper nor the
            # authors' code: a diagnostic, off in every shipped config).
            'caption_first_global': False,
            'text_crop_max_sentences': 5,  # a global text crop holds 1 to this many sentences (the paper: 5)
            # DINO's colour augmentation of every crop. Hue jitter and grayscale teach invariance to colour, which
            # erases half the label of the embedded dataset's classes ('red circle'); (0.4, 0.4, 0.2, 0.0) and 0
            # keep the colours (but for DINO's solarisation of the second global view, p 0.2).
            'crop_color_jitter': (0.4, 0.4, 0.2, 0.1),  # brightness, contrast, saturation, hue
            'crop_grayscale_prob': 0.2,
            # Weight of L_cosmos (1 in the paper; 0 leaves CLIP on COSMOS's crops, an ablation).
            'distill_weight': 1.0}

  @classmethod
  def validate(cls, options, config):
    # The cross-attention's text mask finds the EOT as the largest id of a caption: CLIP's BPE layout.
    require_clip_bpe(config.model.text, "objective 'cosmos'")
    for key in ('num_local_crops', 'num_local_texts', 'local_crop_size', 'text_crop_max_sentences'):
      if not isinstance(options[key], int) or options[key] < 1:
        raise ValueError(f'config.objective.{key} must be a positive integer, got {options[key]!r}')
    context = config.model.text.context_length
    if not 0 <= options.local_text_context_length <= context:
      raise ValueError(f'config.objective.local_text_context_length={options.local_text_context_length} must be in '
                       f'[0, config.model.text.context_length={context}] (0 uses the model context length)')
    transforms.check_color_options('config.objective.crop_color_jitter', options.crop_color_jitter,
                                   'config.objective.crop_grayscale_prob', options.crop_grayscale_prob)
    if options.distill_weight < 0:
      raise ValueError(f'config.objective.distill_weight={options.distill_weight} must be >= 0')
    if not 0.0 <= options.ema_momentum <= 1.0:
      raise ValueError(f'config.objective.ema_momentum={options.ema_momentum} must be in [0, 1]')

  @classmethod
  def record_needs(cls, options, config):
    # caption_first_global or caption_in_text_crops still crop the long caption: every setting needs it
    del options, config
    return [long_caption_need("config.objective.name='cosmos'")]

  uses_data_augment = False  # its views follow its own options

  supports_device_augment = True

  @classmethod
  def device_view_sizes(cls, config):
    return {'global_images': config.model.vision.image_size,
            'local_images': cls.options(config.objective).local_crop_size}

  @classmethod
  def views(cls, config):
    c = cls.options(config.objective)
    require_clip_bpe(config.model.text, "objective 'cosmos'")  # as `validate`, for a config that skipped it
    context = config.model.text.context_length
    on_device = config.data.get('augment_on', 'host') == 'device'
    views_cls = functools.partial(CosmosDeviceViews, source_size=config.data.device_source_size) if on_device \
        else CosmosViews
    return views_cls(config.model.vision.image_size, c.local_crop_size, context,
                     c.local_text_context_length or context, num_local=c.num_local_crops,
                     num_text_local=c.num_local_texts,
                     global_scale=tuple(c.global_crop_scale), local_scale=tuple(c.local_crop_scale),
                     caption_in_text_crops=c.caption_in_text_crops, caption_first_global=c.caption_first_global,
                     text_crop_max_sentences=c.text_crop_max_sentences,
                     color_jitter=tuple(float(x) for x in c.crop_color_jitter),
                     grayscale_prob=float(c.crop_grayscale_prob), **tokenizer_options(config.model.text))

  def _cross_attention(self) -> CrossAttention:
    return CrossAttention(self.model.embed_dim, self.config.cross_attention_heads,
                          self.config.zero_init_cross_attention, self.model.dtype)

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    params, model_state = super().init_variables(rng)
    image_rng, text_rng = jax.random.split(jax.random.fold_in(rng, 1))
    d, v, t = self.model.embed_dim, self.image_output_width(params, model_state), self.model.text.width
    xattn = self._cross_attention()
    params = {**params,
              'cosmos_xattn_image': xattn.init(image_rng, jnp.zeros((1, 1, d)), jnp.zeros((1, 1, t)))['params'],
              'cosmos_xattn_text': xattn.init(text_rng, jnp.zeros((1, 1, d)), jnp.zeros((1, 1, v)))['params'],
              'cosmos_logit_scale': jnp.float32(math.log(1 / 0.07))}
    # The teacher starts as an exact copy of the student's towers.
    return params, {**model_state, 'ema': jax.tree.map(jnp.array, tower_params(params))}

  def after_load(self, params: dict, model_state: dict) -> dict:
    """A run started from a checkpoint (config.init.checkpoint) starts its teacher as a copy of the loaded towers,
    as a fresh run's starts as a copy of its initial ones (otherwise it would distil from random weights)."""
    return {**model_state, 'ema': jax.tree.map(jnp.array, tower_params(params))}

  def _embed_images(self, params, model_state, images: jax.Array, train: bool, rng: jax.Array | None = None):
    """[B, C, H, W, 3] -> (embeddings [B, C, d], model_state); rng: None or [B, C] keys, one per crop."""
    b, c = images.shape[:2]
    out, model_state = self.encode_image(params, model_state, images.reshape(b * c, *images.shape[2:]), train,
                                         rng=_flat(rng))
    return out['embed'].reshape(b, c, -1), model_state

  def _embed_texts(self, params, tokens: jax.Array, train: bool = False, rng: jax.Array | None = None
                   ) -> jax.Array:
    """[B, C, L] -> embeddings [B, C, d]; rng: None or [B, C] keys, one per crop."""
    b, c, length = tokens.shape
    return self.encode_text(params, tokens.reshape(b * c, length), train=train,
                            rng=_flat(rng))['embed'].reshape(b, c, -1)

  def _embed_global_images(self, params, model_state, images: jax.Array, train: bool,
                           rng: jax.Array | None = None):
    """[B, G, H, W, 3] -> ({'embed': [B, G, d], 'tokens': [B, N, w] of the first crop}, model_state); rng: None or
    [B, G] keys, one per crop (a crop gets its own key whichever call embeds it).

    Only the first crop's token states feed the cross-attention, so a ViT runs the other crops' last block on
    their [cls] row alone (a separate, pooled call). A ResNet tower gains nothing from that and would normalise
    each call over its own crops, so it embeds all of them in one call, as before."""
    if self.model.vision.type != 'vit':
      b, g = images.shape[:2]
      out, model_state = self.encode_image(params, model_state, images.reshape(b * g, *images.shape[2:]), train,
                                           with_tokens=True, rng=_flat(rng))
      return {'embed': out['embed'].reshape(b, g, -1),
              'tokens': out['tokens'].reshape(b, g, *out['tokens'].shape[1:])[:, 0]}, model_state
    first, model_state = self.encode_image(params, model_state, images[:, 0], train, with_tokens=True,
                                           rng=None if rng is None else rng[:, 0])
    rest, model_state = self._embed_images(params, model_state, images[:, 1:], train,
                                           None if rng is None else rng[:, 1:])
    return {'embed': jnp.concatenate([first['embed'][:, None], rest], axis=1), 'tokens': first['tokens']}, model_state

  def _embed_global_texts(self, params, tokens: jax.Array, train: bool = False, rng: jax.Array | None = None):
    """[B, G, L] -> {'embed': [B, G, d], 'tokens': [B, L, w] of the first crop}: the other crops run their last
    block on the EOT row alone. rng: None or [B, G] keys, one per crop."""
    first = self.encode_text(params, tokens[:, 0], with_tokens=True, train=train,
                             rng=None if rng is None else rng[:, 0])
    rest = self._embed_texts(params, tokens[:, 1:], train, None if rng is None else rng[:, 1:])
    return {'embed': jnp.concatenate([first['embed'][:, None], rest], axis=1), 'tokens': first['tokens']}

  def cross_attend(self, params: dict, cls: jax.Array, eot: jax.Array, text_tokens: jax.Array,
                   caption_ids: jax.Array, patch_tokens: jax.Array, return_weights: bool = False):
    """The two cross-attention modules: h_img = CrossAttn_image(q=cls [B, Q, d], kv=text_tokens [B, L, w], the
    caption's token states up to its EOT in caption_ids [B, L]) and h_txt = CrossAttn_text(q=eot [B, Q', d],
    kv=patch_tokens [B, P, w]) -> (h_img [B, Q, d], h_txt [B, Q', d]); with `return_weights` each is a pair with its
    attention weights ([B, heads, Q, L], [B, heads, Q', P]), for plots."""
    text_mask = jnp.arange(caption_ids.shape[1])[None, :] <= jnp.argmax(caption_ids, axis=1)[:, None]
    xattn = self._cross_attention()
    h_img = xattn.apply({'params': params['cosmos_xattn_image']}, cls, text_tokens, text_mask,
                        return_weights=return_weights)
    h_txt = xattn.apply({'params': params['cosmos_xattn_text']}, eot, patch_tokens, return_weights=return_weights)
    return h_img, h_txt

  def features(self, params, model_state, batch, rng, train=True):
    # Tower keys of row i: split(fold_in(rng[i], IMAGE_TOWER), G + N)[c] for image crop c (global crops first),
    # split(fold_in(rng[i], TEXT_TOWER), G + M)[c] for text crop c; the teacher runs deterministically, without keys.
    global_image_rng, local_image_rng = _split_crops(
        tower_rngs(rng, IMAGE_TOWER, crops=batch['global_images'].shape[1] + batch['local_images'].shape[1]),
        batch['global_images'].shape[1])
    global_text_rng, local_text_rng = _split_crops(
        tower_rngs(rng, TEXT_TOWER, crops=batch['texts'].shape[1] + batch['local_texts'].shape[1]),
        batch['texts'].shape[1])
    # the cross-attention reads the token states of the first global crops; no other crop needs them
    glob, model_state = self._embed_global_images(params, model_state, batch['global_images'], train,
                                                  global_image_rng)
    local, model_state = self._embed_images(params, model_state, batch['local_images'], train, local_image_rng)
    texts = self._embed_global_texts(params, batch['texts'], train, global_text_rng)
    local_texts = self._embed_texts(params, batch['local_texts'], train, local_text_rng)
    cls = jnp.concatenate([glob['embed'], local], axis=1)  # [B, 2 + N, d], global crops first
    eot = jnp.concatenate([texts['embed'], local_texts], axis=1)  # [B, 2 + M, d]
    h_img, h_txt = self.cross_attend(params, cls, eot, texts['tokens'], batch['texts'][:, 0], glob['tokens'])
    # The teacher sees the global crops only, without gradient (its batch statistics are the student's).
    teacher = jax.lax.stop_gradient(model_state['ema'])
    t_glob, _ = self._embed_images(teacher, model_state, batch['global_images'], train=False)
    t_text = self._embed_texts(teacher, batch['texts'])
    features = {
        'cls_global': l2_normalize(glob['embed']), 'eot': l2_normalize(eot),
        'h_img': l2_normalize(h_img), 'h_txt': l2_normalize(h_txt),
        'teacher_cls': l2_normalize(t_glob), 'teacher_eot': l2_normalize(t_text),
    }
    features['zi'], features['zt'] = features['cls_global'][:, 0], features['eot'][:, 0]
    return features, model_state

  def loss(self, features, params, step):
    del step
    clip = pairwise_sym_nce(features['cls_global'], features['eot'], params['logit_scale'])
    scale = params['cosmos_logit_scale']
    terms = [pairwise_sym_nce(features[s], features[t], scale)
             for s in ('h_img', 'h_txt') for t in ('teacher_cls', 'teacher_eot')]
    cosmos = sum(terms) / 4
    metrics = {'clip_loss': clip, 'cosmos_loss': cosmos, 'logit_scale': jnp.exp(params['logit_scale']),
               'cosmos_logit_scale': jnp.exp(scale)}
    return clip + self.config.distill_weight * cosmos, metrics

  def after_step(self, params, model_state, step):
    del step
    return {**model_state, 'ema': ema_update(model_state['ema'], tower_params(params), self.config.ema_momentum)}

  def eval_variants(self, params: dict, model_state: dict) -> dict[str, dict]:
    """The student (reported under the plain metric names) and the EMA teacher (`teacher_*` names)."""
    return {'': tower_variables(params, model_state), 'teacher_': tower_variables(model_state['ema'], model_state)}
