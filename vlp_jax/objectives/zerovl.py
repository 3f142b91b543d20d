"""ZeroVL (docs/methods.md §4): CLIP with coin-flipping mixup and text augmentation.

Debiased (single-source) sampling is a data option, `config.data.mixing = 'single_source'` (data/loading/mixing.py), and
decoupled gradient accumulation belongs to the train step; this module holds the rest.

Coin-flipping mixup, per step: lam ~ Beta(alpha, alpha) and a fair coin, both drawn from the step rng.
  heads: images are mixed in pixel space with the reversed batch, x'_i = lam x_i + (1 - lam) x_{B-1-i}, before the
         image tower;
  tails: text embeddings are mixed the same way after the projection and before the L2 norm.
Ablations (`mixup_modality`; the paper flips the coin): 'image' or 'text' fixes the coin, which separates the two
halves; 'targets_only' mixes nothing and keeps the two-target loss with the pair's weight max(lam, 1 - lam) (the
weight of the dominant input under mixup), which separates the soft targets from the mixed inputs: label smoothing
of weight min(lam, 1 - lam) toward the reversed partner.
The loss is `mixup_infonce`: lam CE(logits, arange) + (1 - lam) CE(logits, reversed arange), in both directions.

Temperature. The paper's is learned: "the trainable temperature of contrastive loss is initialized to 0.02"
(appendix A.9), i.e. `fixed_temperature=0` with `config.model.init_logit_scale = log(1 / 0.02)` (as
configs/zerovl_multisource.py). The authors' released configs keep it constant instead (`temperature.name:
constant`, 0.02): `fixed_temperature=0.02`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vlp_jax.objectives.views import ClipViews
from vlp_jax.data.image.image_ops import preprocessing_of
from vlp_jax.data.text.text_augment import TextAugment
from vlp_jax.data.text.tokenizer_factory import require_clip_bpe, tokenizer_options
from vlp_jax.losses.contrastive import l2_normalize
from vlp_jax.losses.mixup import mixup_infonce
from vlp_jax.objectives.base import IMAGE_TOWER, OBJECTIVES, TEXT_TOWER, Objective, tower_rngs


@dataclasses.dataclass
class ZeroVLViews(ClipViews):
  """CLIP's views (with the paper's RandomResizedCrop and AutoAugment when config.data says so), then, when
  `text_augment` is set, the caption tokenised after ZeroVL's word-level augmentation (data/text/text_augment.py)."""
  text_augment: TextAugment | None = None

  def text_tokens(self, example: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    # Drawn after the image, so the image is the same with and without text augmentation.
    if self.text_augment is None:
      return super().text_tokens(example, rng)
    return self.text_augment(example[self.caption_field], rng, self.context_length)


MIXUP_MODALITIES = ('coin', 'image', 'text', 'targets_only')


def mix_with_reversed(x: jax.Array, lam: jax.Array) -> jax.Array:
  """[B, ...] -> [B, ...]: lam x + (1 - lam) x[::-1], the reversal over the (global) batch axis."""
  lam = lam.astype(x.dtype)
  return lam * x + (1 - lam) * x[::-1]


@OBJECTIVES.register('zerovl')
class ZeroVLObjective(Objective):

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    return {
        **super().default_config(), 'name': cls.name,
        'mixup': True,  # coin-flipping mixup
        'mixup_alpha': 0.1,  # lam ~ Beta(alpha, alpha)
        'mixup_modality': 'coin',  # 'coin': a fair coin per step picks what is mixed (the paper); 'image', 'text'
        # or 'targets_only' (ablations: see the module docstring)
        'text_augment': True,  # pick, then mask / replace / delete caption words (host side, appendix A.9)
        'text_augment_prob': 0.2,  # fraction of caption words picked
        'text_mask_prob': 0.5,  # of the picked: masked (one mask id of data/text/text_augment.py per word) ...
        'text_replace_prob': 0.1,  # ... replaced by a random vocabulary word ...
        'text_delete_prob': 0.4,  # ... or deleted
        # > 0: a constant temperature (the authors' released configs: 0.02); 0: the learned logit scale, from
        # config.model.init_logit_scale (the paper: trainable, initialised at 0.02, i.e. log 50)
        'fixed_temperature': 0.0,
    }

  @classmethod
  def validate(cls, c: ml_collections.ConfigDict, config: ml_collections.ConfigDict | None = None) -> None:
    """Raise ValueError naming the first invalid option of `config.objective` (and, given the whole `config`, a
    text augmentation the model's tokenizer cannot take)."""
    if c.mixup_alpha <= 0:
      raise ValueError(f'config.objective.mixup_alpha={c.mixup_alpha} must be > 0 (lam ~ Beta(alpha, alpha))')
    if c.mixup_modality not in MIXUP_MODALITIES:
      raise ValueError(f'config.objective.mixup_modality={c.mixup_modality!r} must be one of {MIXUP_MODALITIES}')
    if c.fixed_temperature < 0:
      raise ValueError(f'config.objective.fixed_temperature={c.fixed_temperature} must be >= 0 (0 = learned)')
    keys = ('text_augment_prob', 'text_mask_prob', 'text_replace_prob', 'text_delete_prob')
    for key in keys:
      if not 0.0 <= c[key] <= 1.0:
        raise ValueError(f'config.objective.{key}={c[key]} must be a probability in [0, 1]')
    split = sum(c[key] for key in keys[1:])
    if abs(split - 1.0) > 1e-6:
      raise ValueError(f'config.objective.text_mask_prob + text_replace_prob + text_delete_prob must sum to 1, got '
                       f'{split}')
    if config is not None and c.text_augment:  # it edits CLIP BPE ids (its mask and replacement tokens)
      require_clip_bpe(config.model.text, 'config.objective.text_augment=True')

  def __init__(self, model, config: ml_collections.ConfigDict):
    super().__init__(model, config)
    self.validate(config)

  @classmethod
  def views(cls, config: ml_collections.ConfigDict) -> ZeroVLViews:
    c = cls.options(config.objective)
    cls.validate(c, config)
    augment = TextAugment(c.text_augment_prob, c.text_mask_prob, c.text_replace_prob,
                          c.text_delete_prob) if c.text_augment else None
    return ZeroVLViews(config.model.vision.image_size, config.model.text.context_length, config.data.caption_field,
                       crop_scale=tuple(config.data.crop_scale), augment=config.data.augment, text_augment=augment,
                       **tokenizer_options(config.model.text), preprocessing=preprocessing_of(config.model))

  @property
  def mixes_inputs(self) -> bool:
    return self.config.mixup_modality != 'targets_only'

  def draw_mixup(self, rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(lam [], heads [] bool) for one step, from the step rng (the same on every device). heads = images mixed;
    with `mixup_modality` 'image' or 'text' the coin is fixed, and lam is the same draw as under the coin (with
    'targets_only' the coin is drawn but nothing is mixed)."""
    lam_rng, coin_rng = jax.random.split(rng)
    lam = jax.random.beta(lam_rng, self.config.mixup_alpha, self.config.mixup_alpha, dtype=jnp.float32)
    modality = self.config.mixup_modality
    heads = jnp.bool_(modality == 'image') if modality in ('image', 'text') else jax.random.bernoulli(coin_rng)
    return lam, heads

  def prepare(self, batch: dict[str, jax.Array], rng: jax.Array, train: bool = True) -> dict[str, jax.Array]:
    """Draw (lam, coin) once for the global batch; on heads mix the images with the reversed global batch.

    Adds 'mixup_lambda' and 'mixup_coin' ([B] float32, the same in every row; coin 1 = images mixed, 0 = texts).
    Runs on the whole batch before any micro-batching, so the mix partner is always example B-1-i of the GLOBAL
    batch. Without mixup (or in eval) lam = 1 and nothing is mixed.
    """
    mixup = train and self.config.mixup
    lam, heads = self.draw_mixup(rng) if mixup else (jnp.float32(1.0), jnp.bool_(False))
    if not self.mixes_inputs:  # unmixed inputs: the pair itself is the dominant one
      lam = jnp.maximum(lam, 1.0 - lam)
    batch_size = batch['image'].shape[0]
    out = {**batch, 'mixup_lambda': jnp.full((batch_size,), lam, jnp.float32),
           'mixup_coin': jnp.full((batch_size,), heads, jnp.float32)}
    if mixup and self.mixes_inputs:  # weight 1 where the coin picked the other modality: exactly the identity
      out['image'] = mix_with_reversed(batch['image'], jnp.where(heads, lam, 1.0))
    return out

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
               train: bool = True) -> tuple[dict, dict]:
    """Per example. batch {'image': [B, H, W, 3] (already mixed by `prepare`), 'text': [B, L], 'mixup_lambda',
    'mixup_coin': [B]} -> ({'zi': [B, d] L2-normalised, 'text_embed': [B, d] projected but not normalised,
    'mixup_lambda', 'mixup_coin': [B]}, model state). Tower keys of row i (of the mixed batch): fold_in(rng[i],
    IMAGE_TOWER) and fold_in(rng[i], TEXT_TOWER)."""
    image, model_state = self.encode_image(params, model_state, batch['image'], train,
                                           rng=tower_rngs(rng, IMAGE_TOWER))
    text_embed = self.encode_text(params, batch['text'], train=train,
                                  rng=tower_rngs(rng, TEXT_TOWER))['embed'].astype(jnp.float32)
    return {'zi': l2_normalize(image['embed']), 'text_embed': text_embed,
            'mixup_lambda': batch['mixup_lambda'], 'mixup_coin': batch['mixup_coin']}, model_state

  def batch_features(self, features: dict, params: dict, model_state: dict, train: bool = True
                     ) -> tuple[dict, dict]:
    """On tails, mix the text embeddings with the reversed batch after the projection and before the L2 norm:
    adds 'zt' [B, d]."""
    del params, train
    lam, heads = features['mixup_lambda'][0], features['mixup_coin'][0] > 0.5
    weight = jnp.where(heads, 1.0, lam) if self.mixes_inputs else jnp.float32(1.0)
    zt = l2_normalize(mix_with_reversed(features['text_embed'], weight))
    return {**features, 'zt': zt}, model_state

  def log_scale(self, params: dict) -> jax.Array:
    """The log logit scale: learned, or log(1 / fixed_temperature) (then the learned one gets no gradient)."""
    if self.config.fixed_temperature > 0:
      return jnp.float32(np.log(1.0 / self.config.fixed_temperature))
    return params['logit_scale']

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    lam = features['mixup_lambda'][0]  # the same for every sample
    loss, metrics = mixup_infonce(features['zi'], features['zt'], self.log_scale(params), lam)
    return loss, {'mixup_loss': loss, 'mixup_lambda': lam, 'mixup_coin': features['mixup_coin'][0], **metrics}
