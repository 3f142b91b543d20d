"""The objective interface every method implements. A step runs, on the global batch:

  prepare(batch, rng, train) -> batch               whole-batch input ops, no parameters (ZeroVL's pixel mixup)
  features(params, model_state, batch, rng, train)  the towers; PER EXAMPLE: row i of every output depends only on
      -> (features, model_state)                    row i of the batch, so a batch can be embedded in micro-batches
  batch_features(features, params, model_state, train)  cheap whole-batch ops on features (SLIP's head, whose
      -> (features, model_state)                    BatchNorm uses batch statistics; ZeroVL's text-embedding mixup)
  loss(features, params, step) -> (loss, metrics)   batch-level and pure: logit and affinity matrices live here

`forward` chains the first three. Decoupled gradient accumulation (vlp_jax/accumulation.py) runs `features` per
micro-batch and differentiates `batch_features` + `loss` on the whole batch of features, so an objective is exact
under it as long as `features` is per example. The model state holds non-trained variables (BatchNorm statistics,
an EMA teacher); it is an empty dict for a plain ViT CLIP.

Randomness in the towers (patch dropout, drop path, ...). `features` gets one key per example, `rng` [B] =
`example_rngs(step_rng, B)`: row i's key is fold_in(features_rng(step_rng), i), i its row in the global batch.
`forward` builds them for the whole batch, and decoupled accumulation builds the same [B] keys and slices them with
the batch, so a row gets the same key however the batch is split. `features` derives each tower call's keys from
them with `tower_rngs` (row i of tower call t: fold_in(rng[i], t), split once more per crop for multi-view inputs)
and hands them to `encode_image` / `encode_text`, which give them to the tower only when training. A tower draws
example i's randomness from its key alone (models/towers.py), so a stochastic tower stays per example, and exact
under decoupled accumulation, with no change here or in the objectives: the option lives in its model file and its
config entry. Per-example keys are module inputs, not flax `rngs`: flax accepts one scalar key per stream, and the
draws from one key for the rows of a call depend on which rows share the call, i.e. on the micro-batching.
Deterministic towers ignore the keys; XLA removes them, and results are bit-for-bit what they were without keys.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from vlp_jax.data.image import device_augment
from vlp_jax.data.image.image_ops import OPENAI_CLIP_PREPROCESSING, images_to_float, preprocessing_of
from vlp_jax.data.storage.record_needs import RecordNeed
from vlp_jax.data.image.resolution_stages import stage_starts
from vlp_jax.data.text.tokenizer_factory import tokenizer_options
from vlp_jax.models import init_variables
from vlp_jax.models.towers import fold_in_rows
from vlp_jax.objectives.views import ClipViews
from vlp_jax.registry import Registry



def with_defaults(defaults: dict, given: Any) -> ml_collections.ConfigDict:
  """Options not set in `given` (a ConfigDict or dict) take their `defaults`; unknown keys are dropped (validation
  reports them before this runs)."""
  given = given.to_dict() if isinstance(given, ml_collections.ConfigDict) else dict(given)
  return ml_collections.ConfigDict({**defaults, **{k: v for k, v in given.items() if k in defaults}})


def features_rng(step_rng: jax.Array) -> jax.Array:
  """The rng `features` gets; `prepare` gets the step rng itself."""
  return jax.random.fold_in(step_rng, 1)


def example_rngs(step_rng: jax.Array, size: int) -> jax.Array:
  """The per-example keys `features` gets for a batch of `size` rows: [size], row i's = fold_in(features_rng(
  step_rng), i) (i: the row of the global batch; the same key whatever the batch size or micro-batching)."""
  return jax.vmap(jax.random.fold_in, (None, 0))(features_rng(step_rng), jnp.arange(size))


def num_rows(batch: dict) -> int:
  """B, the leading size shared by every entry of a batch."""
  return jax.tree.leaves(batch)[0].shape[0]


# Tower calls of an objective's `features`, for `tower_rngs`: each gets keys of its own.
IMAGE_TOWER, TEXT_TOWER = 0, 1


def tower_rngs(rng: jax.Array | None, tower: int, crops: int | None = None) -> jax.Array | None:
  """The keys of one tower call from the per-example keys `rng` [B]: fold_in(rng[i], tower) for row i ([B]); with
  `crops` (several views or crops of each example through the same tower), that key split into one per crop
  ([B, crops]; `.reshape(-1)` matches images [B, crops, ...] reshaped to [B * crops, ...]). None stays None."""
  if rng is None:
    return None
  keys = fold_in_rows(rng, tower)
  return keys if crops is None else jax.vmap(lambda key: jax.random.split(key, crops))(keys)


def tower_variables(params: dict, model_state: dict) -> dict:
  """The variables the two towers read: parameters and, for ResNet towers, BatchNorm statistics."""
  return {'params': params, **({'batch_stats': model_state['batch_stats']} if 'batch_stats' in model_state else {})}


def ema_update(teacher: Any, student: Any, momentum: float) -> Any:
  """theta_t <- momentum * theta_t + (1 - momentum) * theta_s, leaf by leaf (a teacher's update, an EMA of the
  weights)."""
  return jax.tree.map(lambda t, s: momentum * t + (1.0 - momentum) * s, teacher, student)


# CLIP's bound on the learned temperature of a softmax loss (the scale exp(log scale) clipped at 100).
MAX_LOG_LOGIT_SCALE = math.log(100.0)

OBJECTIVES: Registry[type['Objective']] = Registry('objective', 'objective.name', package='vlp_jax.objectives')
TERMS: Registry[type['Term']] = Registry('term', 'objective.terms', package='vlp_jax.objectives')


class Objective:
  """Base class. Subclasses set `name` (via `@OBJECTIVES.register`) and may extend `default_config`."""
  name: str = ''
  # True only when the loss is a mean of per-example losses, so that averaging micro-batch gradients gives the
  # full-batch gradient (accumulation mode 'microbatch'). Contrastive losses couple every pair of the batch: False.
  per_example_loss: bool = False
  log_batch_similarity: bool = False  # config.log.batch_similarity, set by `bind`

  def __init__(self, model, config: ml_collections.ConfigDict):
    self.model = model
    self.config = config

  def bind(self, config: ml_collections.ConfigDict) -> None:
    """What the objective reads of the whole run config (`objectives.build` calls it once): a locked image tower
    (`config.optim.lock_image`) keeps its BatchNorm statistics, and the run's length (`total_steps`) is known to
    objectives staged over it (siglip2's switch). Subclasses that read more extend it."""
    self.freeze_image_batch_norm = bool(config.optim.get('lock_image', False))
    self.log_batch_similarity = bool(config.log.get('batch_similarity', False))
    self.total_steps = int(config.total_steps)
    self.preprocessing = preprocessing_of(config.model)
    on_device = config.data.get('augment_on', 'host') == 'device'
    self.device_views = self.device_view_sizes(config) if on_device else {}

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    """Options this objective accepts under `config.objective`, with their defaults (used to validate configs).

    `terms` lists extra loss terms (e.g. ('saco',)) added to this objective's loss; see `Term`.
    """
    return {'name': cls.name, 'terms': ()}

  @classmethod
  def validate(cls, options: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the key when an option is invalid (called by config validation, before anything is
    built). `options` is `config.objective` completed with the defaults."""

  @classmethod
  def record_needs(cls, options: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> list[RecordNeed]:
    """The record fields these options read besides the image and the caption (data/storage/record_needs.py), checked
    against a sample of the training records before anything compiles (training/start_checks.py). `options` as
    `validate`'s. Default: none."""
    del options, config
    return []

  @classmethod
  def options(cls, objective_config: Any) -> ml_collections.ConfigDict:
    """`config.objective` with every option it does not set taken from `default_config()`."""
    return with_defaults(cls.default_config(), objective_config)

  # A locked image tower (config.optim.lock_image, set by `bind`) runs its BatchNorm on the running
  # statistics and never updates them, as open_clip's FrozenBatchNorm2d (`freeze_batch_norm_2d`, its
  # --lock-image-freeze-bn-stats): training must not move any of a locked tower's variables.
  freeze_image_batch_norm = False
  total_steps: int | None = None  # config.total_steps, set by `bind`
  preprocessing = OPENAI_CLIP_PREPROCESSING  # the model's (config.model.preprocess), set by `bind`
  # The upper bound the train step clips every learned `*logit_scale` (a log) to after each update, the lower
  # being 0: CLIP's for softmax losses; None clips nothing (the sigmoid loss, as big_vision trains it).
  max_log_logit_scale: float | None = MAX_LOG_LOGIT_SCALE

  def late_starts(self) -> dict[str, int]:
    """{top-level parameter name: the first step it trains} for parameter groups that get no gradient before a
    step > 0 (SigLIP 2's self-distillation heads); the optimizer keeps weight decay off them until then. Empty by
    default: every parameter trains from step 0."""
    return {}

  # Whether the views can leave their crops and colour augmentations to the train step
  # (config.data.augment_on='device'; data/image/device_augment.py), and {batch key: side} of the views the step then
  # renders (set by `bind`; empty: the host makes every view).
  supports_device_augment = False
  device_views: dict[str, int] = {}

  @classmethod
  def device_view_sizes(cls, config: ml_collections.ConfigDict) -> dict[str, int]:
    """{batch key: side} of the image views this objective's device-mode views leave to the step."""
    raise NotImplementedError(f"objective '{cls.name}' has no device-made views (config.data.augment_on)")

  def views_to_render(self, batch: dict) -> dict[str, int]:
    """{batch key: side} of the views the step renders for this batch: `device_views` (objectives whose batches
    are not all alike say which render)."""
    del batch
    return self.device_views

  # Whether the views honour config.data.crop_scale and config.data.augment (objectives with views of their own,
  # set by their own options, say False, and the config check refuses those settings for them).
  uses_data_augment = True

  @classmethod
  def views(cls, config: ml_collections.ConfigDict):
    """The host-side transform that turns a decoded example into this objective's inputs (a grain RandomMap, run
    in the data workers). CLIP's: one resized image and the caption tokenised by the model's tokenizer."""
    return ClipViews(config.model.vision.image_size, config.model.text.context_length, config.data.caption_field,
                     crop_scale=tuple(config.data.crop_scale), augment=config.data.augment,
                     **tokenizer_options(config.model.text), preprocessing=preprocessing_of(config.model),
                     size_stages=stage_starts(config.data.get('resolution_stages', ()), config.total_steps))

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    """(params, model_state): the trainable parameters of the two towers plus any heads the objective adds, and the
    non-trained model state (BatchNorm statistics)."""
    return init_variables(self.model, rng)

  def encode_image(self, params: dict, model_state: dict, images: jax.Array, train: bool, with_tokens: bool = False,
                   rng: jax.Array | None = None) -> tuple[dict[str, jax.Array], dict]:
    """The image tower; returns its outputs and the model state, with the tower's BatchNorm statistics updated when
    training. Other entries of the model state (an EMA teacher, say) pass through untouched. The patch `tokens` only
    `with_tokens` (without, the last block computes the [cls] row alone). rng: None or one key per image ([B], see
    `tower_rngs`), which the tower gets only when `train` (at eval it runs deterministically, without keys). With
    `freeze_image_batch_norm`, a tower with BatchNorm statistics runs as in evaluation, its statistics unchanged."""
    variables = tower_variables(params, model_state)
    rng = rng if train else None
    if train and 'batch_stats' in model_state and self.freeze_image_batch_norm:
      # `train` of a BatchNorm tower (the ResNet: no stochastic option) only switches BatchNorm to batch statistics.
      return self.model.apply(variables, images, False, with_tokens, method=self.model.encode_image), model_state
    if train and 'batch_stats' in model_state:
      out, updates = self.model.apply(variables, images, True, with_tokens, rng, method=self.model.encode_image,
                                      mutable=['batch_stats'])
      return out, {**model_state, 'batch_stats': updates['batch_stats']}
    return self.model.apply(variables, images, train, with_tokens, rng, method=self.model.encode_image), model_state

  def image_output_width(self, params: dict, model_state: dict, output: str = 'tokens') -> int:
    """w of the image tower's `output`, 'tokens' [B, N, w] (a ViT's width, a ResNet's 32 * width channels) or
    'cls' [B, w], by shape inference (no compute): for heads and decoders sized to read it."""
    size = self.model.vision.image_size
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    out = jax.eval_shape(lambda p, s, x: self.encode_image(p, s, x, False, with_tokens=output == 'tokens')[0][output],
                         params, model_state, images)
    return out.shape[-1]

  def encode_text(self, params: dict, tokens: jax.Array, with_tokens: bool = False, train: bool = False,
                  rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """The text tower's outputs; the per-token states (`tokens`) only `with_tokens`. rng: as `encode_image`'s, one
    key per caption, given to the tower only when `train`."""
    return self.model.apply({'params': params}, tokens, with_tokens, rng if train else None,
                            method=self.model.encode_text)

  def prepare(self, batch: dict[str, jax.Array], rng: jax.Array, train: bool = True) -> dict[str, jax.Array]:
    """Whole-batch input transforms applied before the batch is split into micro-batches. Default: none."""
    del rng, train
    return batch

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array | None,
               train: bool = True) -> tuple[Any, dict]:
    """Per-example outputs of the towers ({name: [B, ...]}) and the model state. rng: [B] keys, one per row
    (`example_rngs`; None: no tower gets keys), from which every tower call takes its own (`tower_rngs`)."""
    raise NotImplementedError

  def batch_features(self, features: dict, params: dict, model_state: dict, train: bool = True
                     ) -> tuple[dict, dict]:
    """Whole-batch transforms of the features ([B, ...] -> [B, ...]), before the loss. Default: none."""
    del params, train
    return features, model_state

  def prepared(self, batch: dict[str, jax.Array], rng: jax.Array, train: bool = True) -> dict[str, jax.Array]:
    """The whole batch as the towers take it: uint8 images normalised with the model's mean and std
    (`image_ops.images_to_float`), then `prepare`. Every path from a pipeline batch to `features` goes through here."""
    batch = device_augment.render_batch(batch, self.views_to_render(batch))  # config.data.augment_on='device'
    return self.prepare(images_to_float(batch, self.preprocessing), rng, train)

  def forward(self, params: dict, model_state: dict, batch: dict[str, jax.Array], rng: jax.Array,
              train: bool = True) -> tuple[dict, dict]:
    """prepared -> features -> batch_features on one whole batch: what `loss` takes, and the model state."""
    batch = self.prepared(batch, rng, train)
    features, model_state = self.features(params, model_state, batch, example_rngs(rng, num_rows(batch)), train)
    return self.batch_features(features, params, model_state, train)

  def after_step(self, params: dict, model_state: dict, step: jax.Array) -> dict:
    """Model state after the optimizer step, inside the jitted step (e.g. an EMA teacher update). Default: as is."""
    del params, step
    return model_state

  def after_load(self, params: dict, model_state: dict) -> dict:
    """Model state once `params` come from a checkpoint (config.init.checkpoint): what `init_variables` derives from
    the parameters (an EMA teacher's copy of the tower) derived again from the loaded ones. Default: as is."""
    del params
    return model_state

  def eval_variants(self, params: dict, model_state: dict) -> dict[str, dict]:
    """The tower variables to evaluate, by metric-name prefix: '' is what the eval metrics report (the trained
    model); objectives with a teacher add it, e.g. {'teacher_': ...}."""
    return {'': tower_variables(params, model_state)}

  def loss(self, features: Any, params: dict, step: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    raise NotImplementedError


class Term:
  """A loss term that composes with any objective (SaCo adds to CLIP, SLIP or COSMOS).

  It reads the objective's features, which always include 'zi' and 'zt' ([B, d] L2-normalised image and text
  embeddings of the main view), may add per-sample features of its own, and adds `loss()` to the objective's.
  """
  name: str = ''
  per_example_loss: bool = False  # as Objective.per_example_loss

  def __init__(self, config: ml_collections.ConfigDict, run_config: ml_collections.ConfigDict | None = None):
    """config: the term's options (`config.objective.<name>` with defaults); run_config: the whole config, for
    options that follow the run (a ramp over `total_steps`)."""
    self.config = config
    self.run_config = run_config

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    return {}

  @classmethod
  def validate(cls, term_config: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the key when an option is invalid (called before anything is built)."""

  @classmethod
  def record_needs(cls, term_config: ml_collections.ConfigDict, config: ml_collections.ConfigDict
                   ) -> list[RecordNeed]:
    """As `Objective.record_needs`, for the term's options. Default: none."""
    del term_config, config
    return []

  def init_state(self) -> dict:
    """Non-trained variables the term keeps in the model state (e.g. a frozen teacher); merged at init."""
    return {}

  def features(self, params: dict, model_state: dict, batch: dict[str, jax.Array], features: dict) -> dict:
    """Extra per-sample features, merged into the objective's. A tower run here runs in eval mode (SaCo's frozen
    teacher) and takes no keys; a term that ran a tower in training would need an `rng` argument here, which
    `Composite.features` would fill from its per-example keys with a tower id of the term's (`tower_rngs`)."""
    del params, model_state, batch, features
    return {}

  def loss(self, features: dict, params: dict, step: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    raise NotImplementedError


class Composite(Objective):
  """An objective plus terms: features merged, losses summed, metrics of every part kept."""

  def __init__(self, base: Objective, terms: list[Term]):
    super().__init__(base.model, base.config)
    self.base, self.terms = base, terms
    self.name = base.name
    self.freeze_image_batch_norm = base.freeze_image_batch_norm
    self.per_example_loss = base.per_example_loss and all(term.per_example_loss for term in terms)
    self.max_log_logit_scale = base.max_log_logit_scale
    self.total_steps = base.total_steps
    self.device_views = base.device_views

  def late_starts(self) -> dict[str, int]:
    return self.base.late_starts()

  def init_variables(self, rng: jax.Array) -> tuple[dict, dict]:
    params, model_state = self.base.init_variables(rng)
    for term in self.terms:
      model_state = {**model_state, **term.init_state()}
    return params, model_state

  def after_step(self, params, model_state, step):
    return self.base.after_step(params, model_state, step)

  def after_load(self, params, model_state):
    return self.base.after_load(params, model_state)

  def eval_variants(self, params, model_state):
    return self.base.eval_variants(params, model_state)

  def prepared(self, batch, rng, train=True):
    return self.base.prepared(batch, rng, train)  # the base's own (SigLIP 2's NaFlex patches, its deferred views)

  def prepare(self, batch, rng, train=True):
    return self.base.prepare(batch, rng, train)

  def features(self, params, model_state, batch, rng, train=True):
    features, model_state = self.base.features(params, model_state, batch, rng, train)
    for term in self.terms:
      features = {**features, **term.features(params, model_state, batch, features)}
    return features, model_state

  def batch_features(self, features, params, model_state, train=True):
    return self.base.batch_features(features, params, model_state, train)

  def loss(self, features, params, step):
    loss, metrics = self.base.loss(features, params, step)
    for term in self.terms:
      term_loss, term_metrics = term.loss(features, params, step)
      loss = loss + term_loss
      metrics = {**metrics, **term_metrics}
    return loss, metrics
