"""SLIP: CLIP plus SimCLR on two augmented views of each image (docs/methods.md §2, SLIP Algorithm 1).

  L = L_clip(zi, zt) + c * L_simclr(qa, qb)
zi, zt: the CLIP embeddings of the CLIP view (RandomResizedCrop, scale (0.5, 1)) and the caption. qa, qb: the
L2-normalised outputs of the SimCLR head on the vision tower's class token (after ln_post, before the CLIP
projection) for the two SSL views. The head's BatchNorm uses statistics of the global batch (one call per view, as
SLIP's SyncBatchNorm), so the head runs in `batch_features`, on the whole batch, after the per-example towers.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vlp_jax.data.image import device_augment, transforms
from vlp_jax.data.storage import records
from vlp_jax.data.loading.pipeline import passthrough
from vlp_jax.data.text.tokenizer_factory import CLIP_BPE, cached_tokenizer, tokenizer_options
from vlp_jax.losses.contrastive import clip_infonce, l2_normalize
from vlp_jax.losses.simclr import simclr_loss
from vlp_jax.models.heads import SimCLRHead
from vlp_jax.objectives.base import IMAGE_TOWER, OBJECTIVES, TEXT_TOWER, tower_rngs
from vlp_jax.objectives.clip import ClipBase
from vlp_jax.registry import check_choice

SSL_VIEWS = ('ssl_a', 'ssl_b')
VIEWS = ('image', *SSL_VIEWS)  # the CLIP view first
SSL_BACKGROUNDS = ('keep', 'random')  # config.objective.ssl_background


@dataclasses.dataclass
class SlipViews(grain.transforms.RandomMap):
  """A decoded example -> {'image': the CLIP view, 'ssl_a', 'ssl_b': the SimCLR views (each [S, S, 3] uint8,
  normalised in the train step), 'text': [L] int32 (the model's tokenizer: config.model.text's `tokenizer` and
  `tokenizer_path`), plus `passthrough(example)`}. Deterministic for a given generator state."""
  image_size: int
  context_length: int
  caption_field: str = 'caption'
  clip_crop_scale: tuple[float, float] = (0.5, 1.0)
  ssl_crop_scale: tuple[float, float] = (0.08, 1.0)
  ssl_color_jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
  ssl_grayscale_prob: float = 0.2
  ssl_background: str = 'keep'
  tokenizer: str = CLIP_BPE
  tokenizer_path: str = ''

  def __post_init__(self):
    cached_tokenizer(self.tokenizer, self.tokenizer_path)  # a bad tokenizer setting fails here, not in a worker

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    image = example['image']
    out = {'image': transforms.random_resized_crop(image, self.image_size, tuple(self.clip_crop_scale), rng)}
    mask = self._mask(example) if self.ssl_background == 'random' else None
    for view in SSL_VIEWS:
      source = image if mask is None else transforms.random_background(image, mask, rng)
      out[view] = transforms.simclr_view(source, self.image_size, rng, self.ssl_crop_scale, self.ssl_color_jitter,
                                         self.ssl_grayscale_prob)
    tokenize = cached_tokenizer(self.tokenizer, self.tokenizer_path)
    out['text'] = tokenize(example[self.caption_field], context_length=self.context_length)[0]
    return {**out, **passthrough(example)}

  @staticmethod
  def _mask(example: dict[str, Any]) -> np.ndarray:
    """The example's [H, W] class map, which ssl_background='random' needs to find the background."""
    if example.get('mask') is None:
      raise ValueError("config.objective.ssl_background='random' needs a per-pixel class map in each record's "
                       f"'mask' field (the embedded dataset has one); record {example.get('key', '?')!r} has none")
    return records.decode_mask(example['mask'])


@dataclasses.dataclass
class SlipDeviceViews(SlipViews):
  """SlipViews with the image views left to the train step (config.data.augment_on='device'): -> 'text' and the
  passthrough fields as SlipViews, and {device_augment.SOURCE_KEY: [R, R, 3] uint8 (the decoded image squashed to
  `source_size`), 'image_params', 'ssl_a_params', 'ssl_b_params': [P] float32}, drawn from the generator as
  SlipViews draws its views; `Objective.prepared` renders 'image', 'ssl_a' and 'ssl_b' from them. Not with
  ssl_background='random' (it edits the decoded image per view)."""
  source_size: int = 256

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    image = example['image']
    height, width = image.shape[:2]
    suffix = device_augment.PARAMS_SUFFIX
    out = {device_augment.SOURCE_KEY: device_augment.source_image(image, self.source_size),
           'image' + suffix: device_augment.crop_params(height, width, tuple(self.clip_crop_scale), rng)}
    for view in SSL_VIEWS:
      out[view + suffix] = device_augment.simclr_view_params(height, width, rng, self.ssl_crop_scale,
                                                             self.ssl_color_jitter, self.ssl_grayscale_prob)
    tokenize = cached_tokenizer(self.tokenizer, self.tokenizer_path)
    out['text'] = tokenize(example[self.caption_field], context_length=self.context_length)[0]
    return {**out, **passthrough(example)}


@OBJECTIVES.register('slip')
class SlipObjective(ClipBase):
  """CLIP InfoNCE on the CLIP view plus `ssl_scale` times SimCLR on the two SSL views."""

  def __init__(self, model, config: ml_collections.ConfigDict):
    super().__init__(model, config)
    self.check_options(config)
    self.head = SimCLRHead(config.head_mlp_dim, config.head_out_dim, dtype=model.dtype)

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    return {
        **super().default_config(),
        'name': cls.name,
        'ssl_scale': 1.0,  # c: the weight of the SimCLR loss
        'ssl_temperature': 0.1,  # tau, fixed
        'head_mlp_dim': 4096,
        'head_out_dim': 256,
        'clip_crop_scale': (0.5, 1.0),  # RandomResizedCrop scale of the CLIP view
        # The SimCLR views (SLIP's defaults). Hue jitter and grayscale teach invariance to colour, which is fine for
        # natural images but erases half the label of the embedded dataset's classes ('red circle').
        'ssl_crop_scale': (0.08, 1.0),
        'ssl_color_jitter': (0.4, 0.4, 0.4, 0.1),  # brightness, contrast, saturation, hue
        'ssl_grayscale_prob': 0.2,
        # 'keep' (SLIP). 'random' is a diagnostic, not SLIP, and never a recipe: it reads the records' ground-truth
        # class masks (an oracle neither SLIP nor its control has) to give each SimCLR view its own random background
        # (transforms.random_background) before its augmentations, so that the two views share only their objects.
        # It measures how far SimCLR matches the embedded web scenes' per-image gradient (benchmarks/background_cue.py;
        # benchmarks/RESULTS_ARCHIVE.md, part 9).
        'ssl_background': 'keep',
    }

  @classmethod
  def validate(cls, options: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> None:
    cls.check_options(options)
    if config.data.get('augment_on', 'host') == 'device' and options.ssl_background != 'keep':
      raise ValueError(f"config.objective.ssl_background={options.ssl_background!r} needs "
                       "config.data.augment_on='host' (it replaces each SSL view's background on the host); valid "
                       "choice with augment_on='device': 'keep'")

  @classmethod
  def check_options(cls, options: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the first invalid option; `options` is `cls.options(config.objective)`. Also run
    when the objective or its views are built, so that a config that skipped validation fails early too."""
    for key in ('head_mlp_dim', 'head_out_dim'):
      if not isinstance(options[key], int) or options[key] < 1:
        raise ValueError(f'config.objective.{key} must be a positive integer, got {options[key]!r}')
    if not options.ssl_temperature > 0:
      raise ValueError(f'config.objective.ssl_temperature must be positive, got {options.ssl_temperature!r}')
    if not options.ssl_scale >= 0:
      raise ValueError(f'config.objective.ssl_scale must be >= 0, got {options.ssl_scale!r}')
    for key in ('clip_crop_scale', 'ssl_crop_scale'):
      scale = tuple(options[key])
      if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
        raise ValueError(f'config.objective.{key}={scale!r} must be (low, high) with 0 < low <= high <= 1')
    check_choice('objective.ssl_background', options.ssl_background, SSL_BACKGROUNDS)
    transforms.check_color_options('config.objective.ssl_color_jitter', options.ssl_color_jitter,
                                   'config.objective.ssl_grayscale_prob', options.ssl_grayscale_prob)

  uses_data_augment = False  # its views follow its own options

  supports_device_augment = True

  @classmethod
  def device_view_sizes(cls, config: ml_collections.ConfigDict) -> dict[str, int]:
    return {view: config.model.vision.image_size for view in VIEWS}

  @classmethod
  def views(cls, config: ml_collections.ConfigDict) -> SlipViews:
    options = cls.options(config.objective)
    cls.validate(options, config)
    on_device = config.data.get('augment_on', 'host') == 'device'
    views_cls = functools.partial(SlipDeviceViews, source_size=config.data.device_source_size) if on_device \
        else SlipViews
    return views_cls(config.model.vision.image_size, config.model.text.context_length, config.data.caption_field,
                     tuple(float(s) for s in options.clip_crop_scale), tuple(float(s) for s in options.ssl_crop_scale),
                     tuple(float(s) for s in options.ssl_color_jitter), float(options.ssl_grayscale_prob),
                     str(options.ssl_background), **tokenizer_options(config.model.text))

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    """The towers as CLIP initialises them from `rng` (same seed, same towers), plus the head under
    params['simclr_head'] and its BatchNorm statistics under model_state['simclr_head']['batch_stats'] (the towers'
    own stay in model_state['batch_stats'], which `tower_variables` reads)."""
    params, model_state = super().init_variables(rng)
    cls = jnp.zeros((2, self.image_output_width(params, model_state, 'cls')), jnp.float32)
    head = self.head.init(jax.random.fold_in(rng, 1), cls, train=False)
    return ({**params, 'simclr_head': head['params']},
            {**model_state, 'simclr_head': {'batch_stats': head['batch_stats']}})

  def project(self, params: dict, model_state: dict, cls: jax.Array, train: bool) -> tuple[jax.Array, dict]:
    """cls: [B, w] -> ([B, head_out_dim] L2-normalised SSL embeddings, model state with the head's BatchNorm
    statistics updated when training)."""
    variables = {'params': params['simclr_head'], **model_state['simclr_head']}
    if not train:
      return l2_normalize(self.head.apply(variables, cls, False)), model_state
    out, updates = self.head.apply(variables, cls, True, mutable=['batch_stats'])
    return l2_normalize(out), {**model_state, 'simclr_head': {'batch_stats': updates['batch_stats']}}

  @staticmethod
  def fuse_views(model_state: dict, batch: dict[str, jax.Array]) -> bool:
    """Whether the three views go through the image tower as one batch of 3B: when the tower has no BatchNorm
    (ViT), rows are independent, so one pass equals three (and compiles the tower once). A tower with BatchNorm
    gets one pass per view, as in SLIP, so that its statistics are per view."""
    return 'batch_stats' not in model_state and len({batch[view].shape for view in VIEWS}) == 1

  def encode_views(self, params: dict, model_state: dict, batch: dict[str, jax.Array], train: bool,
                   rng: jax.Array | None = None) -> tuple[list[dict[str, jax.Array]], dict]:
    """The image tower on batch['image'], batch['ssl_a'], batch['ssl_b'] ([B, H, W, 3] each) -> their
    {'embed': [B, d], 'cls': [B, w]}, in that order, and the model state. rng: [B, 3] keys, one per example and
    view (`tower_rngs(..., crops=3)`); a view gets the same keys in one fused call as in its own."""
    if not self.fuse_views(model_state, batch):
      outs = []
      for i, view in enumerate(VIEWS):
        out, model_state = self.encode_image(params, model_state, batch[view], train,
                                             rng=None if rng is None else rng[:, i])
        outs.append(out)
      return outs, model_state
    # Interleave the views per example ([B, 3, ...] -> [3B, ...]): each device keeps its own rows, no resharding.
    size = batch['image'].shape[0]
    images = jnp.stack([batch[view] for view in VIEWS], axis=1).reshape(3 * size, *batch['image'].shape[1:])
    out, model_state = self.encode_image(params, model_state, images, train,
                                         rng=None if rng is None else rng.reshape(-1))
    split = {key: out[key].reshape(size, len(VIEWS), -1) for key in ('embed', 'cls')}
    return [{key: value[:, i] for key, value in split.items()} for i in range(len(VIEWS))], model_state

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
               train: bool = True) -> tuple[dict, dict]:
    """Per example. batch {'image', 'ssl_a', 'ssl_b': [B, H, W, 3], 'text': [B, L]} -> {'zi', 'zt': [B, d]
    L2-normalised float32, 'ssl_a_cls', 'ssl_b_cls': [B, w] the vision tower's class token of each SSL view}, and
    the model state. Tower keys of row i: split(fold_in(rng[i], IMAGE_TOWER), 3)[v] for view v of VIEWS, and
    fold_in(rng[i], TEXT_TOWER)."""
    missing = [key for key in SSL_VIEWS if key not in batch]
    if missing:
      raise KeyError(f'the SLIP objective needs batch{missing} (the SSL views that SlipObjective.views makes); '
                     f'the batch has {sorted(batch)}')
    (clip_view, *ssl_views), model_state = self.encode_views(params, model_state, batch, train,
                                                             tower_rngs(rng, IMAGE_TOWER, crops=len(VIEWS)))
    text = self.encode_text(params, batch['text'], train=train, rng=tower_rngs(rng, TEXT_TOWER))
    features = {'zi': l2_normalize(clip_view['embed']), 'zt': l2_normalize(text['embed'])}
    for view, out in zip(SSL_VIEWS, ssl_views):
      features[f'{view}_cls'] = out['cls']
    return features, model_state

  def batch_features(self, features: dict, params: dict, model_state: dict, train: bool = True
                     ) -> tuple[dict, dict]:
    """The SimCLR head on each SSL view's class tokens -> adds 'ssl_a', 'ssl_b': [B, head_out_dim] L2-normalised.
    Whole-batch: the head's BatchNorm normalises with statistics of the (global) batch, one call per view as SLIP."""
    features = dict(features)
    for view in SSL_VIEWS:
      features[view], model_state = self.project(params, model_state, features[f'{view}_cls'], train)
    return features, model_state

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict]:
    del step
    clip, clip_metrics = clip_infonce(features['zi'], features['zt'], params['logit_scale'])
    ssl, ssl_metrics = simclr_loss(features['ssl_a'], features['ssl_b'], self.config.ssl_temperature)
    metrics = {'clip_loss': clip, **clip_metrics, 'ssl_loss': ssl, **ssl_metrics}
    return clip + self.config.ssl_scale * ssl, metrics

