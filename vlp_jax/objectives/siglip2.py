"""SigLIP 2 (Tschannen et al. 2025, §2.2-2.3): the sigmoid loss and LocCa's decoder on the original image
throughout, then, from `distill_start_fraction` of the run, SILC's local-to-global self-distillation and TIPS's
masked patch prediction against an EMA teacher of the image tower (docs/methods.md §5).

  L = w_sig L_sigmoid + w_dec L_decoder + active * size_factor * (w_sd L_sd + w_mp L_mp)

  L_sigmoid  the pairwise sigmoid loss on (original image, caption): SigLIP's, objectives/siglip.py;
  L_decoder  LocCa's decoder (models/locca.py) on the original image's un-pooled tokens, one pass per task of
             `decoder_tasks` ('cap', 'aref', 'gcap'; data/text/locca_tasks.py), the token cross-entropy of
             losses/caption_cross_entropy.py: each sequence's mean over its target tokens, then the mean over every sequence
             with a target (so, with every task present, the mean of the task losses). A record without regions
             trains captioning only: its region rows have no target. decoder_weight 0 (the default) turns it off;
             the decoder's parameters (params[locca.PARAMS_NAME]) are trained, never exported;
  L_sd       losses/self_distillation.local_to_global_loss: the teacher's pooled feature of one augmented global
             view, through the teacher's head, is the target of each of V local crops through the student's head;
  L_mp       losses/self_distillation.masked_patch_loss: the student sees the same global view with a fraction of
             its patch embeddings replaced by a learned mask token and predicts, at the masked patches, the teacher's
             patch features of the unmasked view, each through its own patch head.

State. The teacher (image tower and heads, an EMA of the student's) and the heads' centres live in the model state,
with the flag `active`. `after_step` of step s sets active = (s + 1 >= start), start = round(fraction * total_steps),
so step s runs active exactly when s >= start; on the step that turns it on the teacher becomes a copy of the
student, and from then on it follows the student by EMA. Before it the teacher stays as initialised, the centres at
0, the extra views are not embedded (a `lax.cond` on the flag) nor even made (the pipeline tells the views each
example's step, `Siglip2Views.views_from_step`, and fills zeros in their place, so that the step keeps one program;
with config.data.augment_on='device' the step renders them from the host's draws, inside that `lax.cond`)
and the heads and mask token get no gradient, so their Adam moments are still zero at the switch; the optimizer
holds their weight decay off until it (`late_starts`), so they start fresh, as initialised (decayed,
siglip2_webli's heads would shrink by exp(-60) and underflow). A resumed run reads all of this from the checkpoint,
and a skipped (non-finite) step only delays the switch.

Exactness. Every view's tower keys come from the example's own key (the local crops through `tower_rngs`, the mask
from another tower id), the teacher and the masked view run without keys (no patch dropout: their patches must line
up), and the centres move in `batch_features`, on the whole batch: decoupled accumulation is exact. The decoder's
task sequences come from the host (`Siglip2Views`, from the example's own rng, after every other draw), and its
features are per sequence (mean cross-entropy, target count), reduced over the whole batch in `loss`: exact too.

NaFlex stage (SigLIP 2 §2.4.2; `naflex_start_fraction` < 1). From round(naflex_start_fraction * total_steps) the
views send NaFlex patches of the whole image ('image_patches', 'image_spatial_shapes'; data/image/naflex_stage.py) at a
patch budget drawn per batch from the step, which `prepare` wraps into NaflexImages for the image tower. A NaFlex
batch trains the sigmoid loss and the decoder only (the paper drops self-distillation and masked prediction there;
their views are not made), the decoder reading each image's real patches only. Each budget is a batch signature of
its own, so the train step compiles once per sequence length (training/step.CompiledStep). Padding is masked in
the tower and the decoder, and the features stay per example: decoupled accumulation is exact on NaFlex batches.

Memory. The decoder runs one task at a time under `jax.checkpoint`, so only one task's logits [B, L, V] exist at
once, in the forward pass and in the backward pass (which recomputes them), never [B, T, L, V].
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vlp_jax.data import formats as data_formats
from vlp_jax.data.image import device_augment, naflex_stage, transforms
from vlp_jax.data.loading import pipeline
from vlp_jax.data.text import locca_tasks
from vlp_jax.data.image.image_ops import images_to_float, preprocessing_of
from vlp_jax.data.text.tokenizer_factory import cached_tokenizer, tokenizer_options
from vlp_jax.errors import ConfigError
from vlp_jax.losses import caption_cross_entropy as captioning
from vlp_jax.losses.contrastive import l2_normalize, siglip_loss
from vlp_jax.losses.self_distillation import local_to_global_loss, masked_patch_loss, updated_center
from vlp_jax.models import locca
from vlp_jax.models.groups import IMAGE_ROOT
from vlp_jax.models.towers import vision_tower
from vlp_jax.models.naflex_inputs import NaflexImages, sequence_lengths
from vlp_jax.objectives.base import OBJECTIVES, ema_update, example_rngs, num_rows, tower_rngs
from vlp_jax.objectives.siglip import SiglipBase
from vlp_jax.objectives.views import ClipViews

# Tower calls beyond base.IMAGE_TOWER (the original image) and base.TEXT_TOWER, each with keys of its own.
LOCAL_CROPS, MASK_DRAW = 2, 3

DISTILL_HEAD, MASKED_HEAD, MASK_TOKEN = 'siglip2_distill_head', 'siglip2_masked_head', 'siglip2_mask_token'
TEACHER, CENTERS, ACTIVE = 'siglip2_teacher', 'siglip2_centers', 'siglip2_active'  # model-state entries
PATCH_EMBEDDING = 'conv1'  # the patch-embedding conv of every patch-based tower, under `visual/`
DECODER = locca.PARAMS_NAME
DECODER_VOCABULARIES = ('tokenizer', 'train_texts')
VOCABULARY = locca.VOCABULARY_NAME  # model-state entry: {'text_ids': [K] int32}, with decoder_vocabulary 'train_texts'
# The decoder's features: per sequence [B, T], its mean cross-entropy, target count, correct argmax count, whether
# it is predicted in parallel.
DECODER_FEATURES = ('decoder_nll', 'decoder_tokens', 'decoder_correct', 'decoder_parallel')
NAFLEX_BUDGET = 'naflex_budget'  # feature [B] of a NaFlex batch: its patch budget N (the same in every row)


class DistillationHead(nn.Module):
  """DINO's projection head: three Dense layers (GELU between), an L2-normalised bottleneck, then a weight-normalised
  (unit-column, no gain) Dense onto the prototypes. Runs in float32: the teacher's sharp softmax needs it."""
  hidden_dim: int
  bottleneck_dim: int
  prototypes: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [..., w] -> logits [..., K]."""
    init = nn.initializers.truncated_normal(0.02)
    x = x.astype(jnp.float32)
    x = nn.gelu(nn.Dense(self.hidden_dim, kernel_init=init, name='fc1')(x), approximate=False)
    x = nn.gelu(nn.Dense(self.hidden_dim, kernel_init=init, name='fc2')(x), approximate=False)
    x = l2_normalize(nn.Dense(self.bottleneck_dim, kernel_init=init, name='fc3')(x))
    prototypes = self.param('prototypes', init, (self.bottleneck_dim, self.prototypes))
    return x @ (prototypes / jnp.linalg.norm(prototypes, axis=0, keepdims=True))


def masked_patch_count(num_patches: int, ratio: float) -> int:
  """M = round(ratio * N), at least 1: the patches each image masks."""
  return max(1, int(num_patches * ratio + 0.5))


def masked_patches(rng: jax.Array, num_patches: int, ratio: float) -> jax.Array:
  """rng: [B] keys -> [B, N] float32, 1 at the M = masked_patch_count(N, ratio) patches each image masks: a uniformly
  random M-subset drawn from that image's key alone (random, not block-wise, masking)."""
  count = masked_patch_count(num_patches, ratio)
  draw = lambda key: jnp.zeros((num_patches,), jnp.float32).at[  # noqa: E731
      jax.random.permutation(key, num_patches)[:count]].set(1.0)
  return jax.vmap(draw)(rng)


def mask_token_interceptor(mask: jax.Array, token: jax.Array):
  """A flax method interceptor (`nn.intercept_methods`) that replaces, in the image tower's patch embedding [B, h, w,
  c], the patches where mask [B, h * w] is 1 by `token` [c], before the position embedding is added (TIPS's
  encoder does the same). Every other module call passes through."""
  def intercept(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    parent = getattr(context.module, 'parent', None)
    if (context.method_name != '__call__' or context.module.name != PATCH_EMBEDDING
        or getattr(parent, 'name', None) != IMAGE_ROOT):
      return out
    b, h, w, _ = out.shape
    if mask.shape != (b, h * w):
      raise ValueError(f'a patch mask of shape {mask.shape} for a patch grid of {b} x {h} x {w}')
    return jnp.where(mask.reshape(b, h, w, 1) > 0, token.astype(out.dtype), out)
  return intercept


@dataclasses.dataclass
class Siglip2Views(ClipViews):
  """CLIP's views (the original image, as the data config sets it, and the caption) plus, for the self-distillation
  losses, augmented views drawn after them: -> {'image', 'text', 'label', 'global_view': [S, S, 3] (with
  `num_global`), 'local_views': [V, s, s, 3] (with `num_local` > 0)}, uint8.

  The global view is a RandomResizedCrop of `global_scale` with DINO's first-view augmentation (blur always, no
  solarisation), each local view one of `local_scale` at `local_size` px (blur p 0.5), as SILC takes DINO's.

  With `decoder_layout`, the decoder's task rows of the caption and the record's regions (locca_tasks.example_arrays:
  'locca_inputs', 'locca_targets' [T, L] int32, 'locca_loss_mask' [T, L] float32, 'locca_parallel' [T] bool).

  An example the pipeline draws for a step before `views_from_step` (its STEP_KEY) gets neither view, only their
  draws (`fill_batch` puts zeros in their place in the training process).

  From `naflex_from_step` (the NaFlex stage; None: none) an example's image comes as NaFlex patches of the whole
  decoded image at its aspect ratio ('image_patches' [N, P*P*3] uint8, 'image_spatial_shapes' [2] int32;
  naflex_stage.naflex_pixels, patch size `patch_size`) in place of 'image', N the budget of its step's batch
  (naflex_stage.batch_sequence_length of `naflex_seed`, the step and `naflex_sequence_lengths`); the augmented views
  are then not made (the stage drops the losses that read them), their draws still are, and the decoder's boxes
  are the record's (the whole image is kept)."""
  local_size: int = 96
  num_global: int = 1
  num_local: int = 8
  global_scale: tuple[float, float] = (0.4, 1.0)
  local_scale: tuple[float, float] = (0.05, 0.4)
  color_jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.2, 0.1)
  grayscale_prob: float = 0.2
  decoder_layout: locca_tasks.LoccaLayout | None = None
  decoder_tasks: tuple[str, ...] = locca_tasks.TASKS
  decoder_parallel_prob: float = 0.0
  views_from_step: int = 0  # the switch: the augmented views of an example drawn for an earlier step are not made
  naflex_from_step: int | None = None  # the NaFlex stage's first step; None: no NaFlex stage
  naflex_sequence_lengths: tuple[int, ...] = ()  # config.data.naflex.sequence_lengths
  naflex_seed: int = 0  # config.seed, which the per-batch budget is drawn from
  patch_size: int = 16  # config.model.vision.patch_size

  def random_map(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = super().random_map(example, rng)
    image = example['image']
    budget = self.naflex_budget(example.get(pipeline.STEP_KEY))
    if budget:  # the NaFlex stage: the whole image at its aspect ratio, as patches, in place of the square view
      del out['image']
      out[naflex_stage.PATCHES], out[naflex_stage.SPATIAL_SHAPES] = naflex_stage.naflex_pixels(
          image, self.patch_size, budget, self.preprocessing)
    # Before the switch the late losses read no view: their draws are made (transforms.dino_view_draws), so that the
    # decoder's rows, drawn after them, are the same either way, but not the views (about 85% of the host work and
    # two thirds of the bytes of an example at siglip2_webli's shapes). Without the pipeline's step: all built. The
    # NaFlex stage makes none either.
    build = not budget and example.get(pipeline.STEP_KEY, self.views_from_step) >= self.views_from_step
    out.update(self.augmented_views(image, rng, build))
    if self.decoder_layout is not None:  # drawn last: the views above are those of a run without the decoder
      encode = cached_tokenizer(self.tokenizer, self.tokenizer_path).encode
      # the boxes follow the view's resize (random crops and augmentation are refused with them)
      regions = example.get('regions') if budget else locca_tasks.regions_in_view(
          example.get('regions'), *image.shape[:2], self.image_size, self.preprocessing)
      out.update(locca_tasks.example_arrays(example[self.caption_field], regions, rng,
                                            self.decoder_layout, encode, self.decoder_tasks,
                                            self.decoder_parallel_prob))
    return out

  def augmented_views(self, image: np.ndarray, rng: np.random.Generator, build: bool) -> dict[str, np.ndarray]:
    """[H, W, 3] uint8 -> {'global_view': [S, S, 3], 'local_views': [V, s, s, 3]} uint8 (those of the options),
    drawn from `rng` in that order; with `build` False only their draws are made ({})."""

    def view(size, scale, blur_p):
      if not build:
        transforms.dino_view_draws(image.shape[0], image.shape[1], tuple(scale), rng, tuple(self.color_jitter),
                                   self.grayscale_prob, blur_p, 0.0)
        return None
      crop = transforms.random_resized_crop(image, size, tuple(scale), rng)
      return transforms.dino_augment(crop, rng, tuple(self.color_jitter), self.grayscale_prob, blur_p, 0.0)
    out = {}
    if self.num_global:
      out['global_view'] = view(self.image_size, self.global_scale, 1.0)
    if self.num_local:
      local_views = [view(self.local_size, self.local_scale, 0.5) for _ in range(self.num_local)]
      out['local_views'] = np.stack(local_views) if build else None
    return out if build else {}

  def naflex_budget(self, step: int | None) -> int:
    """The patch budget N of the batch of train step `step`; 0 outside the NaFlex stage (or without a step)."""
    if self.naflex_from_step is None or step is None or step < self.naflex_from_step:
      return 0
    return naflex_stage.batch_sequence_length(self.naflex_seed, step, self.naflex_sequence_lengths)

  def fill_batch(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch of B examples -> the same with zeros for the views `random_map` did not make (before the switch):
    'global_view' [B, S, S, 3] and 'local_views' [B, V, s, s, 3] uint8. Run in the training process, after the data
    workers (pipeline.train_iterator), so the workers neither make nor send them, while every batch keeps one
    signature: the train step compiles once, its memory is checked for the whole step at the start, and the steps
    before the switch are bit for bit what they are with the views, which the flag keeps unread until then. A
    NaFlex batch (its own programs, one per budget) reads no view: it stays as it is."""
    if naflex_stage.is_naflex_batch(batch):
      return batch
    size = len(batch['label'])
    shapes = {'global_view': (size, self.image_size, self.image_size, 3) if self.num_global else None,
              'local_views': (size, self.num_local, self.local_size, self.local_size, 3) if self.num_local else None}
    missing = {key: np.zeros(shape, np.uint8) for key, shape in shapes.items() if shape and key not in batch}
    return {**batch, **missing} if missing else batch


@dataclasses.dataclass
class Siglip2DeviceViews(Siglip2Views):
  """Siglip2Views with the augmented views left to the train step (config.data.augment_on='device'): from the switch
  (and outside the NaFlex stage) -> {device_augment.SOURCE_KEY: [R, R, 3] uint8 (the decoded image squashed to
  `source_size`), 'global_view_params': [P], 'local_views_params': [V, P] float32} in place of the views, drawn
  from the generator as Siglip2Views draws them (so 'image', 'text' and the decoder's rows are the same too);
  `Siglip2Objective.late_views` renders 'global_view' and 'local_views' from them, under the flag. Before the switch
  `fill_batch` puts a zero source and whole-image rows in their place (one batch signature, as in host mode)."""
  source_size: int = 256

  def augmented_views(self, image: np.ndarray, rng: np.random.Generator, build: bool) -> dict[str, np.ndarray]:
    draw = functools.partial(device_augment.dino_view_params, *image.shape[:2], rng=rng,
                             jitter=tuple(self.color_jitter), grayscale_p=self.grayscale_prob, solarize_p=0.0)
    params = {}
    if self.num_global:
      params['global_view'] = draw(tuple(self.global_scale), blur_p=1.0)
    if self.num_local:
      params['local_views'] = np.stack([draw(tuple(self.local_scale), blur_p=0.5) for _ in range(self.num_local)])
    if not build or not params:
      return {}
    return {device_augment.SOURCE_KEY: device_augment.source_image(image, self.source_size),
            **{key + device_augment.PARAMS_SUFFIX: value for key, value in params.items()}}

  def fill_batch(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch of B examples made before the switch -> the same with a zero source [B, R, R, 3] uint8 and
    whole-image parameter rows ('global_view_params' [B, P], 'local_views_params' [B, V, P]), which the step
    neither renders nor reads while the flag is off; a NaFlex batch, or one with its views' parameters, as it is."""
    if naflex_stage.is_naflex_batch(batch) or device_augment.SOURCE_KEY in batch or not (
        self.num_global or self.num_local):
      return batch
    size = len(batch['label'])
    out = {**batch, device_augment.SOURCE_KEY: np.zeros((size, self.source_size, self.source_size, 3), np.uint8)}
    if self.num_global:
      out['global_view' + device_augment.PARAMS_SUFFIX] = np.tile(device_augment.WHOLE_IMAGE, (size, 1))
    if self.num_local:
      out['local_views' + device_augment.PARAMS_SUFFIX] = np.tile(device_augment.WHOLE_IMAGE, (size, self.num_local, 1))
    return out


@functools.lru_cache(maxsize=4)
def _split_text_ids(data_json: str, tokenizer: str, tokenizer_path: str) -> tuple[int, ...]:
  data = ml_collections.ConfigDict(json.loads(data_json))
  encode = cached_tokenizer(tokenizer, tokenizer_path).encode
  return tuple(sorted({int(t) for text in data_formats.split_texts(data, 'train') for t in encode(text)}))


def train_text_ids(config: Any) -> tuple[int, ...]:
  """The sorted tokenizer ids (config.model.text's tokenizer) of every text of the training records: captions and
  region descriptions (data.formats.split_texts). Read once per process and data config."""
  return _split_text_ids(config.data.to_json(), **tokenizer_options(config.model.text))


def decoder_layout(options: Any, config: Any) -> locca_tasks.LoccaLayout:
  """The decoder's vocabulary and sequence layout from the objective's options and the run config (its text tower;
  with decoder_vocabulary 'train_texts', the training data's text ids)."""
  text = config.model.text
  tokenizer = cached_tokenizer(**tokenizer_options(text))
  text_ids = train_text_ids(config) if options.decoder_vocabulary == 'train_texts' else ()
  return locca_tasks.tokenizer_layout(tokenizer, options.decoder_box_bins,
                                      options.decoder_length or text.context_length,
                                      options.decoder_loss_on_condition, text_ids)


def naflex_token_mask(spatial_shapes: jax.Array, length: int) -> jax.Array:
  """spatial_shapes [B, 2] (rows, cols) -> [B, length] bool: True at each NaFlex image's rows * cols real patches."""
  return jnp.arange(length)[None, :] < sequence_lengths(spatial_shapes)[:, None]


def normalized_naflex_patches(patches: jax.Array, spatial_shapes: jax.Array, preprocessing) -> jax.Array:
  """patches [B, N, P*P*3] uint8, spatial_shapes [B, 2] -> [B, N, P*P*3] float32 normalised with the model's mean and
  std (image_ops.normalize_image, the formula `naflex_patches` uses), zero rows past each image's rows * cols."""
  pixels = preprocessing.normalize(patches.reshape(*patches.shape[:-1], -1, 3)).reshape(patches.shape)
  real = naflex_token_mask(spatial_shapes, patches.shape[1])
  return jnp.where(real[..., None], pixels, 0.0)


def _zeros_of(fn, *args) -> Any:
  """Zeros of the shapes and dtypes `fn(*args)` returns, without computing it."""
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))


@OBJECTIVES.register('siglip2')
class Siglip2Objective(SiglipBase):
  run_config: Any = None  # the whole run config, set by `bind` (the decoder's layout reads its data config)

  @classmethod
  def default_config(cls):
    return {**super().default_config(), 'name': cls.name,
            # L = sigmoid_weight L_sigmoid + size_factor (distill_weight L_sd + masked_weight L_mp); a weight of 0
            # turns its loss off (and, for the two late losses, its views, heads and teacher work).
            'sigmoid_weight': 1.0, 'distill_weight': 1.0, 'masked_weight': 0.25,
            'size_factor': 0.25,  # SigLIP 2: 0.25 for B, 0.5 for L, 1.0 for So400m, 0.5 for g
            'distill_start_fraction': 0.8,  # of config.total_steps; the teacher starts as the student there
            'ema_momentum': 0.999,  # fixed, as SILC keeps it (COSMOS's value at batch 1k)
            'num_local_crops': 8, 'local_crop_size': 96,
            'global_crop_scale': (0.4, 1.0), 'local_crop_scale': (0.05, 0.4),
            'crop_color_jitter': (0.4, 0.4, 0.2, 0.1),  # brightness, contrast, saturation, hue (DINO's)
            'crop_grayscale_prob': 0.2,
            'mask_ratio': 0.5,  # of the patches of the masked-prediction view
            # DINO's head; SILC's and TIPS's sizes are not published. One head for both losses with shared_head.
            'head_hidden_dim': 2048, 'head_bottleneck_dim': 256, 'head_prototypes': 65536, 'shared_head': False,
            'student_temp': 0.1, 'teacher_temp': 0.02,  # COSMOS's grid search for SILC (its Tab. 20)
            'center_momentum': 0.9,  # DINO's
            # LocCa's decoder (SigLIP 2 §2.2: weight 1, from step 0); 0 = off. Tasks: a subset of ('cap', 'aref',
            # 'gcap'); the location tasks need records with regions (e.g. config.data.synthetic.regions).
            'decoder_weight': 0.0, 'decoder_tasks': locca_tasks.TASKS,
            'decoder_parallel_prob': 0.5,  # of caption rows predicted in parallel (CapPa; SigLIP 2's 50%)
            'decoder_box_bins': 32,  # coordinate tokens per axis
            'decoder_length': 0,  # tokens per task sequence; 0 = config.model.text.context_length
            'decoder_layers': 0,  # 0 = half the text tower's (SigLIP 2)
            'decoder_loss_on_condition': True,  # the loss also covers aref's text and gcap's box (LocCa's default)
            'decoder_normalize': 'sequence',  # losses/caption_cross_entropy.py: 'sequence' (big_vision's) or 'token'
            # The text ids the decoder predicts: 'tokenizer' (all, the papers'), or 'train_texts', only those of the
            # training records' captions and region descriptions plus UNK (read from the records at start; a scale
            # adaptation for small data, where the logits over a 49k vocabulary would be most of a step).
            'decoder_vocabulary': 'tokenizer',
            # SigLIP 2's NaFlex stage (§2.4.2): from this fraction of config.total_steps the batches are NaFlex patches
            # of each whole image at its aspect ratio, at a patch budget drawn per batch from
            # config.data.naflex.sequence_lengths; self-distillation and masked prediction stop there (the paper
            # drops them), the sigmoid loss and the decoder go on. 1.0 = no NaFlex stage; the paper branches at 0.9.
            'naflex_start_fraction': 1.0}

  @classmethod
  def validate(cls, options, config):
    super().validate(options, config)
    for key in ('sigmoid_weight', 'distill_weight', 'masked_weight', 'size_factor'):
      if not isinstance(options[key], (int, float)) or isinstance(options[key], bool) or not options[key] >= 0:
        raise ValueError(f'config.objective.{key} must be a number >= 0 (0 turns its loss off), got {options[key]!r}')
    for key in ('distill_start_fraction', 'ema_momentum', 'center_momentum'):
      if not 0.0 <= options[key] <= 1.0:
        raise ValueError(f'config.objective.{key}={options[key]} must be in [0, 1]')
    if not 0.0 < options.mask_ratio < 1.0:
      raise ValueError(f'config.objective.mask_ratio={options.mask_ratio} must be in (0, 1) (the fraction of patches '
                       'masked)')
    for key in ('student_temp', 'teacher_temp'):
      if not options[key] > 0:
        raise ValueError(f'config.objective.{key}={options[key]} must be > 0')
    for key in ('num_local_crops', 'local_crop_size', 'head_hidden_dim', 'head_bottleneck_dim', 'head_prototypes'):
      if not isinstance(options[key], int) or isinstance(options[key], bool) or options[key] < 1:
        raise ValueError(f'config.objective.{key} must be a positive integer, got {options[key]!r}')
    for key in ('global_crop_scale', 'local_crop_scale'):
      scale = tuple(options[key])
      if len(scale) != 2 or not 0.0 < scale[0] <= scale[1] <= 1.0:
        raise ValueError(f'config.objective.{key}={scale} must be (low, high) with 0 < low <= high <= 1')
    transforms.check_color_options('config.objective.crop_color_jitter', options.crop_color_jitter,
                                   'config.objective.crop_grayscale_prob', options.crop_grayscale_prob)
    vision = config.model.vision
    if (options.distill_weight or options.masked_weight) and not vision_tower(vision).patch_based:
      raise ValueError(f"config.objective.name='siglip2' with distill_weight or masked_weight > 0 needs a "
                       f"patch-based image tower (the mask token replaces patches), not config.model.vision.type="
                       f"'{vision.type}'; set both weights to 0 or use a ViT")
    if options.distill_weight and options.local_crop_size < vision.patch_size:
      raise ValueError(f'config.objective.local_crop_size={options.local_crop_size} is smaller than one patch '
                       f'(config.model.vision.patch_size={vision.patch_size})')
    cls.validate_decoder(options, config)
    cls.validate_naflex(options, config)

  @classmethod
  def validate_naflex(cls, options, config):
    """The NaFlex stage's options and what it cannot run with; ConfigError naming the key."""
    fraction = options.naflex_start_fraction
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0.0 <= fraction <= 1.0:
      raise ConfigError(f'config.objective.naflex_start_fraction={fraction!r} must be in [0, 1] (1 = no NaFlex '
                        'stage)')
    if fraction == 1.0:
      return
    vision = config.model.vision
    if vision.type not in naflex_stage.NAFLEX_TOWERS:
      raise ConfigError(f'config.objective.naflex_start_fraction={fraction} trains on NaFlex patches, which only '
                        f'config.model.vision.type in {list(naflex_stage.NAFLEX_TOWERS)} takes, not '
                        f"'{vision.type}'")
    if vision.get('patch_dropout', 0.0):
      raise ConfigError(f'config.model.vision.patch_dropout={vision.patch_dropout} does not apply to NaFlex batches '
                        f'(config.objective.naflex_start_fraction={fraction}); set it to 0')
    if tuple(config.data.crop_scale) or config.data.augment != 'none':
      raise ConfigError(f'config.data.crop_scale={tuple(config.data.crop_scale)} and config.data.augment='
                        f"'{config.data.augment}' do not apply to NaFlex batches, which keep the whole image "
                        f'(config.objective.naflex_start_fraction={fraction}); set them to () and \'none\'')

  @classmethod
  def validate_decoder(cls, options, config):
    """The decoder's options; ConfigError naming the key."""
    weight = options.decoder_weight
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not weight >= 0:
      raise ConfigError(f'config.objective.decoder_weight must be a number >= 0 (0 turns the decoder off), got '
                        f'{weight!r}')
    tasks = tuple(options.decoder_tasks)
    if not tasks or len(set(tasks)) != len(tasks) or any(t not in locca_tasks.TASKS for t in tasks):
      raise ConfigError(f'config.objective.decoder_tasks={tasks} must be distinct tasks from '
                        f'{locca_tasks.TASKS}, at least one')
    if not 0.0 <= options.decoder_parallel_prob <= 1.0:
      raise ConfigError(f'config.objective.decoder_parallel_prob={options.decoder_parallel_prob} must be in [0, 1]')
    for key, low in (('decoder_box_bins', 2), ('decoder_length', 0), ('decoder_layers', 0)):
      if not isinstance(options[key], int) or isinstance(options[key], bool) or options[key] < low:
        raise ConfigError(f'config.objective.{key} must be an integer >= {low}, got {options[key]!r}')
    if options.decoder_vocabulary not in DECODER_VOCABULARIES:
      raise ConfigError(f"config.objective.decoder_vocabulary='{options.decoder_vocabulary}' is not one of "
                        f'{list(DECODER_VOCABULARIES)}')
    if options.decoder_normalize not in captioning.NORMALIZATIONS:
      raise ConfigError(f"config.objective.decoder_normalize='{options.decoder_normalize}' is not one of "
                        f'{list(captioning.NORMALIZATIONS)}')
    if not weight:
      return
    length = options.decoder_length or config.model.text.context_length
    if length <= locca_tasks.REGION_TASK_OVERHEAD:
      raise ConfigError(f'config.objective.decoder_length={length} (0: config.model.text.context_length) leaves no '
                        f'room for a region description; use at least {locca_tasks.REGION_TASK_OVERHEAD + 1}')
    locca_tasks.check_box_geometry(tasks, config.data)
    location = [t for t in tasks if t != 'cap']
    if not location or data_formats.DATA_FORMATS.get(config.data.name).carries_regions(config.data):
      return
    # A location task on records without regions has no target, yet its decoder pass costs as much as captioning's.
    if config.data.name == 'synthetic':
      raise ConfigError(f'config.objective.decoder_tasks={tasks} has the location tasks {location}, but '
                        'config.data.synthetic.regions is False: the records have no regions to train them on. Set '
                        "config.data.synthetic.regions=True, or config.objective.decoder_tasks=('cap',)")
    with_regions = sorted(name for name, fmt in data_formats.DATA_FORMATS.items()
                          if name != 'synthetic' and fmt.carries_regions(config.data))
    raise ConfigError(f"config.objective.decoder_tasks={tasks} has the location tasks {location}, but "
                      f"config.data.name='{config.data.name}' records carry no regions: each location task would run "
                      "a decoder pass with nothing to learn. Set config.objective.decoder_tasks=('cap',), or train "
                      f'on records with regions (config.data.name one of {with_regions}; docs/data.md)')

  @classmethod
  def record_needs(cls, options, config):
    needs = super().record_needs(options, config)
    return needs + locca_tasks.regions_need(tuple(options.decoder_tasks), cls.name) if options.decoder_weight else needs

  @classmethod
  def views(cls, config):
    c = cls.options(config.objective)
    on_device = config.data.get('augment_on', 'host') == 'device'
    views_cls = functools.partial(Siglip2DeviceViews, source_size=config.data.device_source_size) if on_device \
        else Siglip2Views
    return views_cls(config.model.vision.image_size, config.model.text.context_length, config.data.caption_field,
                     crop_scale=tuple(config.data.crop_scale), augment=config.data.augment,
                     **tokenizer_options(config.model.text), preprocessing=preprocessing_of(config.model),
                     local_size=c.local_crop_size,
                     num_global=int(bool(c.distill_weight or c.masked_weight)),
                     num_local=c.num_local_crops if c.distill_weight else 0,
                     global_scale=tuple(c.global_crop_scale), local_scale=tuple(c.local_crop_scale),
                     color_jitter=tuple(float(x) for x in c.crop_color_jitter),
                     grayscale_prob=float(c.crop_grayscale_prob),
                     decoder_layout=decoder_layout(c, config) if c.decoder_weight else None,
                     decoder_tasks=tuple(c.decoder_tasks), decoder_parallel_prob=float(c.decoder_parallel_prob),
                     views_from_step=cls.switch_step(c, config.total_steps),
                     naflex_from_step=cls.naflex_step(c, config.total_steps),
                     naflex_sequence_lengths=tuple(config.data.naflex.sequence_lengths), naflex_seed=config.seed,
                     patch_size=config.model.vision.patch_size)

  supports_device_augment = True

  @classmethod
  def device_view_sizes(cls, config):
    c = cls.options(config.objective)
    sizes = {'global_view': config.model.vision.image_size if c.distill_weight or c.masked_weight else 0,
             'local_views': c.local_crop_size if c.distill_weight else 0}  # as `views` sets num_global, num_local
    return {key: size for key, size in sizes.items() if size}

  def views_to_render(self, batch):
    del batch
    return {}  # device mode: `late_views` renders them under the flag, so never before the switch

  def late_views(self, batch: dict) -> dict:
    """The prepared batch with the late losses' views ('global_view' [B, S, S, 3], 'local_views' [B, V, s, s, 3])
    normalised: in device mode rendered from the source and parameters `prepared` passed through
    (device_augment.render_batch), otherwise as they are. Called under the flag (`_distill_features`)."""
    if not self.device_views:
      return batch
    views = device_augment.render_batch({k: batch[k] for k in self._view_inputs()}, self.device_views)
    return {**batch, **images_to_float(views, self.preprocessing)}

  def _view_inputs(self) -> list[str]:
    """The batch keys of device mode's late-view inputs: the source and one parameter entry per view."""
    return [device_augment.SOURCE_KEY, *(key + device_augment.PARAMS_SUFFIX for key in self.device_views)]

  # ------------------------------------------------------------------------------------------ what is on

  @property
  def distill_on(self) -> bool:
    return bool(self.config.distill_weight and self.config.size_factor)

  @property
  def masked_on(self) -> bool:
    return bool(self.config.masked_weight and self.config.size_factor)

  @property
  def decoder_on(self) -> bool:
    return bool(self.config.decoder_weight)

  def bind(self, config):
    super().bind(config)
    self.run_config = config

  @functools.cached_property
  def layout(self) -> locca_tasks.LoccaLayout:
    """The decoder's (`decoder_layout`); only built when the decoder is on, so that evaluating a checkpoint never
    reads the training data."""
    if self.run_config is None:
      raise ValueError("objective 'siglip2' with its decoder needs the run config: build it with "
                       'objectives.build(config, model)')
    return decoder_layout(self.config, self.run_config)

  def decoder(self) -> locca.LoccaDecoder:
    layout = self.layout
    return locca.decoder_for_text_tower(self.model.text, layout.output_vocab_size, layout.length, self.model.act,
                                        self.config.decoder_layers, self.model.dtype)

  @property
  def uses_teacher(self) -> bool:
    return self.distill_on or self.masked_on

  @staticmethod
  def switch_step(options: Any, total_steps: int) -> int:
    """round(distill_start_fraction * total_steps): the first step of the late losses (and of their views)."""
    return int(round(options.distill_start_fraction * total_steps))

  @staticmethod
  def naflex_step(options: Any, total_steps: int) -> int | None:
    """round(naflex_start_fraction * total_steps): the first step of the NaFlex stage; None without one."""
    if options.naflex_start_fraction >= 1.0:
      return None
    return int(round(options.naflex_start_fraction * total_steps))

  @property
  def start_step(self) -> int:
    """The first step with the self-distillation losses: `switch_step` of the run."""
    if self.total_steps is None:
      raise ValueError("objective 'siglip2' needs the run length: build it with objectives.build(config, model), "
                       'which sets its total_steps from config.total_steps')
    return self.switch_step(self.config, self.total_steps)

  def late_starts(self) -> dict[str, int]:
    """The heads and the mask token, which get no gradient before `start_step`: the optimizer keeps their weight
    decay off until then (optim.late_start_weight_decay), so they start at the switch as initialised."""
    if not self.uses_teacher or self.start_step <= 0:
      return {}
    names = set(self.head_names().values()) | ({MASK_TOKEN} if self.masked_on else set())
    return {name: self.start_step for name in sorted(names)}

  def head_names(self) -> dict[str, str]:
    """{loss: the parameter name of its head} for the losses that are on."""
    names = {}
    if self.distill_on:
      names['distill'] = DISTILL_HEAD
    if self.masked_on:
      names['masked'] = DISTILL_HEAD if self.config.shared_head else MASKED_HEAD
    return names

  def _head(self) -> DistillationHead:
    c = self.config
    return DistillationHead(c.head_hidden_dim, c.head_bottleneck_dim, c.head_prototypes)

  # ------------------------------------------------------------------------------------------ variables

  def teacher_params(self, params: dict) -> dict:
    """What the teacher holds: the image tower and the heads (a subtree of `params`)."""
    return {IMAGE_ROOT: params[IMAGE_ROOT], **{name: params[name] for name in set(self.head_names().values())}}

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    params, model_state = super().init_variables(rng)
    if self.decoder_on:
      width = self.image_output_width(params, model_state)  # the decoder's cross-attention reads tokens of any width
      decoder = self.decoder()
      params[DECODER] = decoder.init(jax.random.fold_in(rng, 3), jnp.zeros((1, 1, width)),
                                     jnp.zeros((1, 1, decoder.length), jnp.int32))['params']
      if self.layout.text_ids:  # the decoder's text vocabulary, for evaluators (`eval_variants`) and checkpoints
        model_state = {**model_state, VOCABULARY: {'text_ids': jnp.asarray(self.layout.text_ids, jnp.int32)}}
    if not self.uses_teacher:
      return params, model_state
    width = self.model.vision.width
    head_rng = jax.random.fold_in(rng, 2)
    for i, name in enumerate(sorted(set(self.head_names().values()))):
      params[name] = self._head().init(jax.random.fold_in(head_rng, i), jnp.zeros((1, width)))['params']
    if self.masked_on:
      params[MASK_TOKEN] = jnp.zeros((width,), jnp.float32)  # iBOT's initialisation
    return params, {**model_state, **self._teacher_state(params)}

  def _teacher_state(self, params: dict) -> dict:
    """The teacher's model state at the start of a run: a copy of the student's tower and heads, the centres at
    zero, the late losses on when they start at step 0."""
    centers = {loss: jnp.zeros((self.config.head_prototypes,), jnp.float32) for loss in self.head_names()}
    return {TEACHER: jax.tree.map(jnp.array, self.teacher_params(params)), CENTERS: centers,
            ACTIVE: jnp.int32(self.start_step <= 0)}

  def after_load(self, params: dict, model_state: dict) -> dict:
    """A run started from a checkpoint starts its teacher as a copy of the loaded tower (with the losses on from
    step 0, the teacher would otherwise be the random initialisation's), whatever teacher the checkpoint held."""
    return {**model_state, **self._teacher_state(params)} if self.uses_teacher else model_state

  def eval_variants(self, params: dict, model_state: dict) -> dict[str, dict]:
    """The base's variants, each with the decoder's text vocabulary (VOCABULARY) where it is not the tokenizer's,
    so that the referring and captioning evaluators decode with the ids the decoder was trained on."""
    variants = super().eval_variants(params, model_state)
    if VOCABULARY not in model_state:
      return variants
    return {prefix: {**variables, VOCABULARY: model_state[VOCABULARY]} for prefix, variables in variants.items()}

  # ------------------------------------------------------------------------------------------ the step

  def prepared(self, batch: dict, rng: jax.Array, train: bool = True) -> dict:
    """The base's, with a NaFlex batch's uint8 patches normalised first (`normalized_naflex_patches`; float
    patches are taken as normalised already) and, in device mode, the late views' inputs as they are (`late_views`
    renders them)."""
    patches = batch.get(naflex_stage.PATCHES)
    if patches is not None and patches.dtype == jnp.uint8:
      batch = {**batch, naflex_stage.PATCHES: normalized_naflex_patches(
          patches, batch[naflex_stage.SPATIAL_SHAPES], self.preprocessing)}
    # device mode: the late views' uint8 source and parameters pass as they are, for `late_views`
    deferred = {k: batch[k] for k in self._view_inputs() if k in batch} if self.device_views else {}
    rest = {k: v for k, v in batch.items() if k not in deferred}
    return {**super().prepared(rest, rng, train), **deferred}

  def prepare(self, batch: dict, rng: jax.Array, train: bool = True) -> dict:
    """A NaFlex batch's patches and grids ('image_patches', 'image_spatial_shapes') become its 'image', as the
    NaflexImages the image tower takes; any other batch passes as it is."""
    batch = super().prepare(batch, rng, train)
    if not naflex_stage.is_naflex_batch(batch):
      return batch
    rest = {k: v for k, v in batch.items() if k not in (naflex_stage.PATCHES, naflex_stage.SPATIAL_SHAPES)}
    return {**rest, 'image': NaflexImages(batch[naflex_stage.PATCHES], batch[naflex_stage.SPATIAL_SHAPES])}

  def _distill_features(self, params: dict, model_state: dict, batch: dict, rng: jax.Array | None) -> dict:
    """The late losses' inputs: the teacher's and the student's head logits ('distill_*' [B, K] and [B, V, K],
    'masked_*' [B, N, K]) and the patch mask [B, N]."""
    heads, head = self.head_names(), self._head()
    teacher = jax.lax.stop_gradient(model_state[TEACHER])
    teacher_variables = {**jax.lax.stop_gradient(params), **teacher}
    batch = self.late_views(batch)
    view = batch['global_view']
    t_out, _ = self.encode_image(teacher_variables, model_state, view, False, with_tokens=self.masked_on)
    out = {}
    if self.distill_on:
      local = batch['local_views']
      b, v = local.shape[:2]
      keys = tower_rngs(rng, LOCAL_CROPS, crops=v)
      s_out, _ = self.encode_image(params, model_state, local.reshape(b * v, *local.shape[2:]), True,
                                   rng=None if keys is None else keys.reshape(-1))
      out['distill_teacher'] = head.apply({'params': teacher[heads['distill']]}, t_out['cls'])
      out['distill_student'] = head.apply({'params': params[heads['distill']]}, s_out['cls']).reshape(b, v, -1)
    if self.masked_on:
      patches = t_out['tokens'].shape[1]
      # Without keys (a deterministic pass) row i takes the mask of the fixed key i.
      keys = tower_rngs(example_rngs(jax.random.key(0), view.shape[0]) if rng is None else rng, MASK_DRAW)
      mask = masked_patches(keys, patches, self.config.mask_ratio)
      with nn.intercept_methods(mask_token_interceptor(mask, params[MASK_TOKEN])):
        s_out, _ = self.encode_image(params, model_state, view, True, with_tokens=True)  # no keys: no dropout
      out['masked_teacher'] = head.apply({'params': teacher[heads['masked']]}, t_out['tokens'])
      out['masked_student'] = head.apply({'params': params[heads['masked']]}, s_out['tokens'])
      out['patch_mask'] = mask
    return out

  def decoder_features(self, params: dict, image_tokens: jax.Array, batch: dict) -> dict:
    """image_tokens [B, N, w] and the batch's task rows ('locca_*' [B, T, L], [B, T]) -> DECODER_FEATURES, each
    [B, T] float32. One decoder pass per task, each rematerialised (see the module docstring: memory), as one loop
    over the tasks (`lax.map`): the compiler sees one decoder, not one per task. With NaFlex images (batch 'image')
    the decoder reads each image's real patches only."""
    decoder = self.decoder()
    image = batch.get('image')
    token_mask = (naflex_token_mask(image.spatial_shapes, image_tokens.shape[1])
                  if isinstance(image, NaflexImages) else None)

    @jax.checkpoint
    def one_task(task: dict) -> tuple[jax.Array, jax.Array, jax.Array]:
      """[B, L] rows of one task -> ([B] mean cross-entropy, [B] target count, [B] correct argmax count)."""
      logits = decoder.apply({'params': params[DECODER]}, image_tokens, task['inputs'], task['parallel'],
                             token_mask)  # [B, L, V]
      nll, count = captioning.sequence_nll(logits, task['targets'], task['loss_mask'])
      return nll, count, captioning.correct_tokens(logits, task['targets'], task['loss_mask'])
    tasks = {key: jnp.moveaxis(batch[f'locca_{key}'], 1, 0) for key in ('inputs', 'targets', 'loss_mask', 'parallel')}
    nll, count, correct = (column.T for column in jax.lax.map(one_task, tasks))  # each [T, B] -> [B, T]
    return dict(zip(DECODER_FEATURES, (nll, count, correct, batch['locca_parallel'].astype(jnp.float32))))

  def _sigmoid_features(self, params, model_state, batch, rng, train):
    """SigLIP's {'zi', 'zt'} (tower keys as CLIP's) and, with the decoder on, its features from the same image pass
    (`decoder_features` of the un-pooled tokens)."""
    if not self.decoder_on:
      return super().features(params, model_state, batch, rng, train)
    image, text, model_state = self.encode_pair(params, model_state, batch, rng, train, with_tokens=True)
    return {'zi': l2_normalize(image['embed']), 'zt': l2_normalize(text['embed']),
            **self.decoder_features(params, image['tokens'], batch)}, model_state

  def features(self, params, model_state, batch, rng, train=True):
    """SigLIP's {'zi', 'zt'} of the original image and caption (tower keys as CLIP's), the decoder's features with it
    on and, with a late loss on, its inputs (`_distill_features`; zeros while the flag is off, the views not
    embedded). Local crop c of row i takes split(fold_in(rng[i], LOCAL_CROPS), V)[c]; its mask is drawn from
    fold_in(rng[i], MASK_DRAW)."""
    features, model_state = self._sigmoid_features(params, model_state, batch, rng, train)
    if isinstance(batch['image'], NaflexImages):  # the NaFlex stage: no late loss (its budget, for the metrics)
      return {**features, NAFLEX_BUDGET: jnp.full((num_rows(batch),), batch['image'].patches.shape[1],
                                                  jnp.float32)}, model_state
    if not self.uses_teacher or not train:
      return features, model_state
    late = jax.lax.cond(model_state[ACTIVE] > 0, self._distill_features,
                        lambda *args: _zeros_of(self._distill_features, *args), params, model_state, batch, rng)
    return {**features, **late}, model_state

  def batch_features(self, features, params, model_state, train=True):
    """Adds the flag and the centres the loss uses ('active' [], '<loss>_center' [K]) and, in training while the
    flag is on, moves each centre towards the mean of the whole batch's teacher logits."""
    if not self.uses_teacher or not train or NAFLEX_BUDGET in features:
      return features, model_state
    active = model_state[ACTIVE] > 0
    centers = model_state[CENTERS]
    features = {**features, 'active': active.astype(jnp.float32),
                **{f'{loss}_center': center for loss, center in centers.items()}}
    moved = {loss: jnp.where(active, updated_center(center, features[f'{loss}_teacher'],
                                                    self.config.center_momentum), center)
             for loss, center in centers.items()}
    return features, {**model_state, CENTERS: moved}

  def loss(self, features, params, step):
    del step  # the switch is the model state's flag, set from the step in `after_step`
    c = self.config
    sigmoid, metrics = siglip_loss(features['zi'], features['zt'], params['logit_scale'], params['logit_bias'])
    total = c.sigmoid_weight * sigmoid
    metrics = {'siglip_loss': sigmoid, **metrics}
    if self.decoder_on:
      decoder, decoder_metrics = self.decoder_loss(features)
      total = total + c.decoder_weight * decoder
      metrics.update(decoder_metrics)
    if NAFLEX_BUDGET in features:  # the NaFlex stage: the batch's patch budget, and no late loss
      metrics['naflex_sequence_length'] = jnp.mean(features[NAFLEX_BUDGET])
    if 'active' not in features:  # the late losses off, not training, or the NaFlex stage
      return total, metrics
    active = features['active']
    metrics['distill_active'] = active
    if self.distill_on:
      distill = active * local_to_global_loss(features['distill_teacher'], features['distill_student'],
                                              features['distill_center'], c.teacher_temp, c.student_temp)
      total = total + c.size_factor * c.distill_weight * distill
      metrics['distill_loss'] = distill
    if self.masked_on:
      masked = active * masked_patch_loss(features['masked_teacher'], features['masked_student'],
                                          features['patch_mask'], features['masked_center'], c.teacher_temp,
                                          c.student_temp)
      total = total + c.size_factor * c.masked_weight * masked
      metrics['masked_loss'] = masked
    return total, metrics

  def decoder_loss(self, features: dict) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L_decoder of the whole batch from DECODER_FEATURES ([B, T]), and its metrics: 'decoder_loss', per task
    'decoder_<task>_loss' (over that task's sequences with a target; 0 where none) and 'decoder_<task>_accuracy'
    (argmax = target over its target tokens), and 'decoder_token_accuracy'; with parallel captions, the caption
    loss of the parallel and the autoregressive rows apart."""
    nll, tokens, correct = features['decoder_nll'], features['decoder_tokens'], features['decoder_correct']
    normalize = self.config.decoder_normalize
    loss, _ = captioning.reduce_sequence_losses(nll, tokens, normalize=normalize)
    metrics = {'decoder_loss': loss,
               'decoder_token_accuracy': jnp.sum(correct) / jnp.maximum(jnp.sum(tokens), 1.0)}
    for t, task in enumerate(self.config.decoder_tasks):
      parallel = features['decoder_parallel'][:, t] if task == 'cap' and self.config.decoder_parallel_prob else None
      task_loss, task_metrics = captioning.reduce_sequence_losses(nll[:, t], tokens[:, t], parallel, normalize)
      metrics[f'decoder_{task}_loss'] = task_loss
      metrics[f'decoder_{task}_accuracy'] = jnp.sum(correct[:, t]) / jnp.maximum(jnp.sum(tokens[:, t]), 1.0)
      metrics.update({f'decoder_{task}_{name}': value for name, value in task_metrics.items()})
    return loss, metrics

  def after_step(self, params, model_state, step):
    """Sets the flag for step + 1 (on from `start_step`); the step that turns it on copies the student into the
    teacher, and each step after that moves the teacher by EMA."""
    if not self.uses_teacher:
      return model_state
    was_on = model_state[ACTIVE] > 0
    turns_on = step + 1 >= self.start_step
    student, teacher = self.teacher_params(params), model_state[TEACHER]
    moved = ema_update(teacher, student, self.config.ema_momentum)
    teacher = jax.tree.map(lambda m, s, t: jnp.where(was_on, m, jnp.where(turns_on, s, t)), moved, student, teacher)
    return {**model_state, TEACHER: teacher, ACTIVE: (was_on | turns_on).astype(jnp.int32)}
