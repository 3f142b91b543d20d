"""The base config every config file starts from, and the validation run before anything is compiled.

Config files in `configs/` call `base_config()` and change what they need. Validation rejects unknown keys (typos),
wrong types and invalid choices with an error that names the key and the valid choices.
"""
from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

import ml_collections
from ml_collections import config_flags

from vlp_jax import accumulation, models, parallel
from vlp_jax.data import formats
from vlp_jax.data.image import device_augment, image_ops, naflex_stage, resolution_stages as resolution
from vlp_jax.data.loading import mixing
from vlp_jax.data.image.autoaugment import AUGMENTATIONS
from vlp_jax.errors import ConfigError, MissingInputError
from vlp_jax.evalsets import EVAL_SETS
from vlp_jax.evalsets.prompts import CHOICES as TEMPLATE_CHOICES
from vlp_jax.evaluation import EVALUATORS
from vlp_jax.models.towers import DTYPES, VISION_TOWERS, vision_tower, with_tower_defaults
from vlp_jax.models.transformer import ACTIVATIONS, ATTENTION_ROUTES, REMAT_POLICIES, check_attention
from vlp_jax.objectives import OBJECTIVES, TERMS, with_defaults
from vlp_jax.registry import RegistryError, check_choice

# config.log.wandb_mode (training/writer.py): wandb.init's mode.
WANDB_MODES = ('online', 'offline', 'disabled')


def define_config_flag(default: str | None = None, help_string: str = 'Path to a config file with get_config().'):
  """The `--config` flag of every entry point. `--config.a.b=v` may set any key `validate` accepts, also one the
  file leaves at its default and so does not name (an objective option such as `objective.fixed_temperature`): a
  new key is parsed as a Python literal (else a string), and `validate` then rejects the unknown ones (typos),
  naming them and the valid keys, and the wrong types."""
  return config_flags.DEFINE_config_file('config', default, help_string, lock_config=False,
                                         accept_new_attributes=True)


def config_from_flag(flag_values: Any) -> ml_collections.ConfigDict:
  """The config that `--config` loaded; ConfigError naming the file when it could not be read (ml_collections
  defers that error to the first use of the flag's value, as an OSError with the cause chained)."""
  try:
    config = flag_values.config
    config.keys()  # a config that failed to load raises here
  except OSError as error:
    path = config_flags.get_config_filename(flag_values['config']).split(':')[0]
    reason = ('no such file' if not os.path.exists(path) else
              ' '.join(str(error.__cause__ or error).split()))  # ml_collections' message, on one line
    raise ConfigError(f'--config={path}: the config file cannot be loaded: {reason}') from None
  return config


def base_config() -> ml_collections.ConfigDict:
  """Every key a config may have (objective options aside: each objective declares its own), at its default."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.total_steps = 1000
  c.batch_size = 256  # global, over all devices and processes
  c.model = models.preset('tiny')
  c.objective = ml_collections.ConfigDict({'name': 'clip', 'terms': ()})
  c.data = _data_config()
  c.optim = _optim_config()
  # An EMA of the weights, evaluated beside them as eval/<set>/ema_* (training/ema.py): after each optimizer step,
  # ema <- decay * ema + (1 - decay) * params. 0 = none; it weighs about the last 1 / (1 - decay) steps.
  c.ema = ml_collections.ConfigDict({'decay': 0.0})
  c.mesh = ml_collections.ConfigDict({'fsdp': 1, 'fsdp_min_size': 2**18})
  # Gradient accumulation (vlp_jax/accumulation.py): 'none' | 'decoupled' (exact for every objective) |
  # 'microbatch' (per-example losses only). micro_batch_size: global rows per micro-batch; must divide batch_size.
  c.accumulation = ml_collections.ConfigDict({'mode': 'none', 'micro_batch_size': 0})
  # Continue pre-training: initialise the towers from a checkpoint (trained, or imported with vlp_jax.weights).
  c.init = ml_collections.ConfigDict({'checkpoint': '', 'require_checkpoint': False})
  c.eval = _eval_config()
  c.log_every_steps = 20
  # perf/mfu divides the achieved FLOP/s per device by the device's published dense bf16 peak (vlp_jax/hardware.py,
  # whatever model.dtype); peak_device_tflops > 0 sets that peak instead (TFLOP/s per device), e.g. for a device not
  # in the table, which otherwise logs no perf/mfu. 0 = look the device up.
  # wandb_project: also send the scalars and the end-of-run plots to Weights & Biases (training/writer.py; needs
  # `pip install wandb`); '' = off. wandb_entity: '' = your default entity. wandb_mode: 'online' | 'offline' (files
  # under the workdir, `wandb sync` later) | 'disabled'. wandb_run_name: '' = the workdir's basename.
  # batch_similarity: CLIP also logs train/image_batch_similarity and train/text_batch_similarity, the mean cosine
  # between different embeddings of the batch (a diagnostic, e.g. of collapse; off: the default metrics stay).
  c.log = ml_collections.ConfigDict({'peak_device_tflops': 0.0, 'wandb_project': '', 'wandb_entity': '',
                                     'wandb_mode': 'online', 'wandb_run_name': '', 'batch_similarity': False})
  # A step with a non-finite loss or gradient is skipped; this many in a row stop the run (0 = never stop).
  c.max_nonfinite_steps = 10
  # async_save: the step goes on while the files are written (the state is copied to host memory first); the
  # manifest that marks a step complete is written once its files are, so a crash mid-write loses only that step.
  c.checkpoint = ml_collections.ConfigDict({'every_steps': 500, 'keep': 3, 'async_save': True})
  # jax.distributed's timeouts in seconds (multi-process runs only; docs/reliability.md): for every process to join,
  # without heartbeats before a process counts as dead (jax then aborts them all; from half of it after a process
  # stops, parallel.jax_abort_earliest_seconds), for the barrier at exit.
  c.distributed = ml_collections.ConfigDict({'initialization_timeout_seconds': 300,
                                             'heartbeat_timeout_seconds': 120, 'shutdown_timeout_seconds': 120})
  # The step watchdog (training/watchdog.py): no step finished within step_timeout_seconds (plus first_step_seconds
  # for the first, which compiles, and eval_seconds for one that evaluates or checkpoints) dumps every thread's stack
  # and exits 77; 0 = off. A peer process silent for peer_timeout_seconds is lost: exit 76. jax may abort every
  # process from heartbeat_timeout_seconds / 2 after a peer stops, so the peer timeout (and its polls) stays below
  # that (validate; parallel.jax_abort_earliest_seconds): 45 + 2 x 2 + 1 < 60.
  c.watchdog = ml_collections.ConfigDict({'step_timeout_seconds': 900, 'first_step_seconds': 1800,
                                          'eval_seconds': 1800, 'peer_timeout_seconds': 45})
  return c


def _data_config() -> ml_collections.ConfigDict:
  """config.data: the training data, the views, the input pipeline, the eval sets' local copies; each data format
  adds its own options (data/formats/)."""
  return ml_collections.ConfigDict({
      # the training data format (a file of data/formats/), whose docstring says what `path` holds; each format's
      # own options are under data.<name> (data.synthetic, data.webdataset, ...)
      'name': 'synthetic',
      'path': '',
      'cache_dir': '',  # where the embedded dataset is generated ('' = $VLP_JAX_CACHE or ~/.cache/vlp_jax)
      'caption_field': 'caption',
      # The image view of CLIP-style objectives (ClipViews, objectives/views.py): () = resize and centre crop, or
      # a RandomResizedCrop area range such as (0.9, 1.0) (open_clip); then 'none' | 'randaugment' | 'autoaugment'
      # | 'dino' (one of DINO's global-view augmentations: COSMOS's CLIP baseline).
      'crop_scale': (),
      'augment': 'none',
      # Staged resolution in one run (data/image/resolution_stages.py, training/stages.py): ((fraction of the steps,
      # image size), ...), e.g. ((0.0, 112), (0.9, 224)); the last at config.model.vision.image_size. () = one size.
      'resolution_stages': (),
      # Where the multi-crop views of COSMOS and SLIP are cropped, resized and colour-augmented: 'host' (the data
      # workers) or 'device' (the train step, from one decoded image per example squashed to device_source_size
      # pixels a side, with the host's draws; data/image/device_augment.py, docs/data.md)
      'augment_on': 'host', 'device_source_size': 256,
      'teacher_embeddings': '',  # .npz from `vlp_jax.embed --dataset`: attaches batch['teacher'] by example key
      'tfds_dir': '',  # data dir of the tfds eval sets ('' = $TFDS_DATA_DIR, else ~/tensorflow_datasets)
      'eval_max_examples': 0,  # evaluate on the first N examples of each eval set (0 = all)
      # the linear probe fits on the first N examples of a set's train split (0 = all; the embedded dataset takes
      # N / 3 of each source). Capped by default: ImageNet's whole train split would be 1.28M images decoded per
      # host; 10,000 (10 per ImageNet class) at 256 px hold 7.3 GiB of float32 images (evalsets/budget.py)
      'probe_train_examples': 10_000,
      # local copies of the compositionality benchmarks (evalsets/compositional.py), for eval.datasets
      'sugarcrepe_dir': '', 'sugarcrepe_images': '', 'winoground_dir': '',
      # a local Flickr30k (dataset_flickr30k.json + flickr30k-images/; evalsets/flickr30k.py), for eval.datasets
      'flickr30k_dir': '',
      'num_workers': 0,  # grain worker processes (0 = decode in the training process)
      'num_threads': 2,  # grain reader threads
      # 'mixed' | 'weighted' | 'single_source' (ZeroVL debiased sampling) | 'sequential'; data/loading/mixing.py
      'mixing': 'mixed',
      # draw shards with replacement, endlessly (open_clip's --dataset-resampled; data/loading/mixing.py
      # ResampledShards), for 'mixed' batches; any shard format
      'resampled': False,
      # each process reads its own shards (every process_count-th; webdataset's split by node) and makes its local
      # batches from them: no shard is read by two hosts, and the global batch depends on the process count;
      # 'mixed' batches; False: one global order, each process reading its block of every batch from any shard
      'shards_by_process': False,
      'source_weights': '',  # 'name=weight,...' for 'weighted' (required) and 'single_source' (default: by size)
      # bad records are replaced; a shard, or the data as a whole, shown to hold more than this share of them stops
      # the run (data/loading/record_stats.py): data within it stops a run with probability below bad_data_alpha
      'max_bad_fraction': 0.1, 'bad_data_alpha': 0.01,
      # the patch budgets of NaFlex batches (SigLIP 2's NaFlex stage, objective.naflex_start_fraction), one drawn
      # uniformly per batch from the step (data/image/naflex_stage.py)
      'naflex': ml_collections.ConfigDict({'sequence_lengths': (128, 256, 576, 784, 1024)}),
      **formats.options(),
  })


def _optim_config() -> ml_collections.ConfigDict:
  """config.optim: AdamW, the learning-rate schedule, locked towers and layer-wise lr decay."""
  return ml_collections.ConfigDict({
      'lr': 5e-4, 'warmup_init_lr': 0.0, 'warmup_steps': 100, 'schedule': 'cosine', 'end_factor': 0.0,
      'b1': 0.9, 'b2': 0.98, 'eps': 1e-6, 'weight_decay': 0.2, 'grad_clip_norm': 0.0,
      # Locked towers (LiT; open_clip's --lock-image, --lock-text): no update and no optimizer state for a locked
      # tower's parameters, and a locked ResNet's BatchNorm statistics stay as they are. *_unlocked_groups /
      # *_unlocked_layers: how many of the tower's last L + 2 groups still train (0 = none; models/groups.py: the
      # embeddings, one per block, the last block with the final LayerNorm, the projection). A ResNet locks whole.
      'lock_image': False, 'lock_image_unlocked_groups': 0, 'lock_text': False, 'lock_text_unlocked_layers': 0,
      # Layer-wise lr decay (BEiT, timm), in (0, 1]; 1 = off: a tower parameter of layer id i (0 the embeddings,
      # 1 .. L the blocks, L + 1 the final LayerNorm and projection) trains at lr * decay ** (L + 1 - i).
      'image_layer_decay': 1.0, 'text_layer_decay': 1.0,
  })


def _eval_config() -> ml_collections.ConfigDict:
  """config.eval: when, on what and with which tasks the model is evaluated."""
  return ml_collections.ConfigDict({
      'every_steps': 500, 'datasets': ('synthetic',), 'split': 'test',
      # each task runs on the eval sets that have what it needs (evaluation.applies)
      'tasks': ('zeroshot', 'retrieval', 'affinity', 'segmentation', 'compositional', 'linear_probe'),
      'batch_size': 256,
      # zero-shot prompts: 'dataset' (each eval set's own set) or a set of evalsets/prompts.py for every set
      'templates': 'dataset',
      # zero-shot and retrieval again at each of these NaFlex patch budgets (a NaFlex image tower), as
      # eval/<set>/naflex<budget>_<metric>; () = none (evaluation/naflex_budgets.py)
      'naflex_max_patches': (),
  })


def from_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config()` of a config file, e.g. to build one config on another (configs/saco_cc3m.py on clip_cc3m.py);
  with `arg`, `get_config(arg)`, what `--config=path:arg` gives on the command line."""
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config() if arg is None else module.get_config(arg)


def with_term(config: ml_collections.ConfigDict, name: str, **options) -> ml_collections.ConfigDict:
  """Add the loss term `name` (e.g. 'saco') to the config's objective, with its defaults and `options`."""
  term = TERMS.get(name)
  config.objective.terms = tuple(config.objective.terms) + (name,)
  config.objective[name] = ml_collections.ConfigDict({**term.default_config(), **options})
  return config


# Keys whose value is one of a table's names (a registry's, or a fixed set of modes).
_CHOICES: dict[str, Any] = {
    'model.act': ACTIVATIONS,
    'model.vision.type': VISION_TOWERS,
    'model.dtype': DTYPES,
    'model.remat_policy': REMAT_POLICIES,
    'model.attention': ATTENTION_ROUTES,
    'data.name': formats.DATA_FORMATS,
    'data.mixing': mixing.MODES,
    'data.augment': ('none', *AUGMENTATIONS),
    'optim.schedule': ('cosine', 'constant'),
    'log.wandb_mode': WANDB_MODES,
    'eval.split': ('val', 'test'),
    'eval.templates': TEMPLATE_CHOICES,
}
_POSITIVE_INTS = ('total_steps', 'batch_size', 'log_every_steps', 'eval.every_steps', 'eval.batch_size',
                  'checkpoint.every_steps', 'checkpoint.keep', 'mesh.fsdp', 'model.embed_dim')
_COUNTS = ('data.eval_max_examples', 'data.probe_train_examples')  # 0 = all


def _get(config: ml_collections.ConfigDict, dotted: str) -> Any:
  value = config
  for part in dotted.split('.'):
    value = value[part]
  return value


def _check_keys(config: Any, reference: Any, prefix: str) -> None:
  """Every key of `config` must exist in `reference`, recursively; types must be compatible."""
  for key in config.keys():
    path = f'{prefix}{key}'
    if key not in reference:
      raise ConfigError(f"unknown config key 'config.{path}'; valid keys here: {sorted(reference.keys())}")
    value, expected = config[key], reference[key]
    if isinstance(expected, (dict, ml_collections.ConfigDict)):
      if not isinstance(value, (dict, ml_collections.ConfigDict)):
        raise ConfigError(f"config.{path} must be a mapping with keys {sorted(expected.keys())}, got {value!r}")
      _check_keys(value, expected, f'{path}.')
    elif isinstance(expected, bool) != isinstance(value, bool) or (
        isinstance(expected, (int, float)) and not isinstance(value, (int, float))) or (
        isinstance(expected, str) and not isinstance(value, str)) or (
        isinstance(expected, (tuple, list)) and not isinstance(value, (tuple, list))):
      raise ConfigError(f'config.{path} has type {type(value).__name__}, expected {type(expected).__name__} '
                        f'(got {value!r})')


def _reference(config: ml_collections.ConfigDict) -> tuple[ml_collections.ConfigDict, type, dict[str, type]]:
  """The base config with the defaults of `config`'s objective and terms: every key `config` may have."""
  reference = base_config()
  objective_config = config.get('objective', {})
  try:
    objective_cls = OBJECTIVES.get(objective_config.get('name', 'clip'))
    terms = {name: TERMS.get(name) for name in objective_config.get('terms', ())}
  except RegistryError as error:
    raise ConfigError(str(error)) from None
  reference.objective = ml_collections.ConfigDict(
      {**objective_cls.default_config(), **{name: term.default_config() for name, term in terms.items()}})
  vision_type = config.get('model', {}).get('vision', {}).get('type')
  if vision_type in VISION_TOWERS:  # an unknown type is reported by the choice check, naming the towers
    reference.model.vision = ml_collections.ConfigDict(vision_tower(vision_type).default_config())
  return reference, objective_cls, terms


def _merge(defaults: dict, saved: dict) -> dict:
  merged = dict(defaults)
  for key, value in saved.items():
    default = defaults.get(key)
    merged[key] = _merge(default, value) if isinstance(default, dict) and isinstance(value, dict) else value
  return merged


def with_current_defaults(saved: dict | ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A config saved by an earlier version (a checkpoint's) with the keys added since at their defaults, so that
  this version's code can read it. Saved values are kept as they are."""
  saved = saved.to_dict() if isinstance(saved, ml_collections.ConfigDict) else saved
  reference = _reference(ml_collections.ConfigDict(saved))[0]
  config = ml_collections.ConfigDict(_merge(reference.to_dict(), saved))
  # Saved before validation bounded the peer timeout by jax's heartbeat (issue 61; the old default 60 s against
  # 120 s is refused now): lowered to the bound, so that the checkpoint still evaluates and resumes. It only sets
  # how soon a lost peer is named, never what the checkpoint holds.
  peer, heartbeat = config.watchdog.peer_timeout_seconds, config.distributed.heartbeat_timeout_seconds
  if isinstance(peer, (int, float)) and isinstance(heartbeat, (int, float)) and heartbeat >= 1 and peer > 0 and \
      parallel.peer_named_latest_seconds(peer) >= parallel.jax_abort_earliest_seconds(heartbeat):
    config.watchdog.peer_timeout_seconds = parallel.longest_peer_timeout_seconds(heartbeat)
  return config


def validate(config: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
  """Raise ConfigError naming the first invalid key. Cheap: nothing is built or compiled.

  Generic checks (unknown keys, types, ranges, choices), then each chosen component's own: the objective and its
  terms, the image and text towers, the data formats' options, the accumulation mode."""
  reference, objective_cls, terms = _reference(config)
  _check_keys(config, reference, '')
  missing = []  # MissingInputError messages: listed together once every other check has passed

  def check(fn, *args) -> None:
    try:
      fn(*args)
    except MissingInputError as error:
      missing.extend(error.messages)

  try:
    check(_check_objective, config, objective_cls, terms)
    _check_counts(config)
    _check_choices(config)
    vision_tower(config.model.vision).validate(with_tower_defaults(config.model.vision), config.model)
    models.validate_text(config.model.text)
    image_ops.check_preprocessing(config.model.preprocess)
    for _, data_format in formats.DATA_FORMATS.items():  # every format's options are in every config
      data_format.validate(config.data)
    _check_data(config.data, objective_cls)
    _check_resolution_stages(config, objective_cls)
    _check_naflex(config)
    check(_check_training, config, num_devices)
    _check_tower_options(config)
    accumulation.validate(config, objective_cls, terms, num_devices)
  except ValueError as error:  # ConfigError, RegistryError and the components' ValueErrors alike
    raise ConfigError(str(error)) from None
  if missing:
    raise MissingInputError(*missing)


def _check_objective(config: ml_collections.ConfigDict, objective_cls: type, terms: dict[str, type]) -> None:
  objective_cls.validate(objective_cls.options(config.objective), config)
  for name, term in terms.items():
    term.validate(with_defaults(term.default_config(), config.objective.get(name, {})), config)


def _check_counts(config: ml_collections.ConfigDict) -> None:
  for key in _POSITIVE_INTS:
    value = _get(config, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
      raise ValueError(f'config.{key} must be a positive integer, got {value!r}')
  for key in _COUNTS:
    value = _get(config, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
      raise ValueError(f'config.{key} must be 0 (all) or a positive integer, got {value!r}')
  check_attention(config.model.get('attention', 'auto'), config.model.get('attention_pad_multiple', 0))  # 0 is valid


def _check_choices(config: ml_collections.ConfigDict) -> None:
  for key, choices in _CHOICES.items():
    check_choice(key, _get(config, key), choices)
  for task in config.eval.tasks:
    EVALUATORS.check(task)
  for name in config.eval.datasets:
    EVAL_SETS.check(name)


# The objectives whose views draw the image size of each example from its step (CLIP's views, objectives/views.py).
STAGED_RESOLUTION_OBJECTIVES = ('clip', 'siglip')


def _check_resolution_stages(config: ml_collections.ConfigDict, objective_cls: type) -> None:
  """config.data.resolution_stages: the schedule (data/image/resolution_stages.py), an objective whose views follow it
  and a tower whose position embedding can be resized at a switch."""
  stages = config.data.resolution_stages
  if not stages:
    return
  vision = config.model.vision
  if objective_cls.name not in STAGED_RESOLUTION_OBJECTIVES:
    raise ValueError(f'config.data.resolution_stages applies to config.objective.name in '
                     f'{list(STAGED_RESOLUTION_OBJECTIVES)}, not {objective_cls.name!r}')
  if vision_tower(vision).position_prefix is None:
    raise ValueError(f'config.data.resolution_stages needs a tower whose position embedding can be resized, not '
                     f"config.model.vision.type={vision.type!r}")
  resolution.check_stages(stages, vision.image_size, vision.patch_size, config.total_steps)


def _check_naflex(config: ml_collections.ConfigDict) -> None:
  """The NaFlex budgets: the training set's, and the evaluation's, which need a NaFlex-capable image tower."""
  naflex_stage.check_sequence_lengths('data.naflex.sequence_lengths', config.data.naflex.sequence_lengths)
  budgets = config.eval.naflex_max_patches
  if not budgets:
    return
  naflex_stage.check_sequence_lengths('eval.naflex_max_patches', budgets)
  if config.model.vision.type not in naflex_stage.NAFLEX_TOWERS:
    raise ValueError(f'config.eval.naflex_max_patches={tuple(budgets)} evaluates NaFlex patches, which only '
                     f'config.model.vision.type in {list(naflex_stage.NAFLEX_TOWERS)} takes, not '
                     f"'{config.model.vision.type}'; set it to ()")


def _check_data(data: ml_collections.ConfigDict, objective_cls: type) -> None:
  """The format-independent keys of config.data: the path, views, bad records, mixing."""
  formats.check_path_is_read(data)
  scale = tuple(data.crop_scale)
  if scale and not (len(scale) == 2 and 0 < scale[0] <= scale[1] <= 1):
    raise ValueError(f'config.data.crop_scale={scale} must be () (centre crop) or (low, high) with '
                     '0 < low <= high <= 1')
  device_augment.check_options(data.augment_on, data.device_source_size)
  if data.augment_on == 'device' and not objective_cls.supports_device_augment:
    raise ValueError(f"config.data.augment_on='device' does not apply to config.objective.name="
                     f"'{objective_cls.name}'; objectives whose views the step can make: "
                     f"{sorted(name for name, cls in OBJECTIVES.items() if cls.supports_device_augment)}")
  if (scale or data.augment != 'none') and not objective_cls.uses_data_augment:
    raise ValueError(f"config.data.crop_scale / config.data.augment do not apply to config.objective.name="
                     f"'{objective_cls.name}', whose views are set by its own options (config.objective)")
  if not 0.0 <= data.max_bad_fraction <= 1.0:
    raise ValueError(f'config.data.max_bad_fraction={data.max_bad_fraction} must be in [0, 1]')
  if not 0.0 < data.bad_data_alpha < 1.0:
    raise ValueError(f'config.data.bad_data_alpha={data.bad_data_alpha} must be in (0, 1): the probability that data '
                     'within config.data.max_bad_fraction stops a run')
  if data.source_weights and data.mixing not in ('weighted', 'single_source'):
    raise ValueError(f"config.data.source_weights is set but config.data.mixing='{data.mixing}' does not use "
                     "weights; set config.data.mixing to 'weighted' or 'single_source'")
  if data.shards_by_process and data.mixing != 'mixed':
    raise ValueError(f"config.data.shards_by_process=True makes 'mixed' batches from each process's own shards; "
                     f"config.data.mixing='{data.mixing}' chooses each global batch's sources over every "
                     "shard: use one of them")
  if data.resampled and data.mixing != 'mixed':
    raise ValueError(f"config.data.resampled=True draws shards for config.data.mixing='mixed' batches, not "
                     f"'{data.mixing}'")
  if data.mixing == 'weighted' and not data.source_weights:
    raise ValueError("config.data.mixing='weighted' needs config.data.source_weights, e.g. 'cc3m=1,cc12m=2'")


def _check_training(config: ml_collections.ConfigDict, num_devices: int | None) -> None:
  """Schedule, initialisation, guards, EMA, logging and the mesh against the device count."""
  if config.optim.warmup_steps < 0:  # more than total_steps is allowed (a smoke run of a real config); advisories
    raise ValueError(f'config.optim.warmup_steps={config.optim.warmup_steps} must be >= 0')
  if not isinstance(config.max_nonfinite_steps, int) or config.max_nonfinite_steps < 0:
    raise ValueError(f'config.max_nonfinite_steps must be an integer >= 0 (0 = never stop), got '
                     f'{config.max_nonfinite_steps!r}')
  if config.optim.lr <= 0:
    raise ValueError(f'config.optim.lr must be positive, got {config.optim.lr}')
  if not 0 <= config.ema.decay < 1:  # NaN fails too
    raise ValueError(f'config.ema.decay must be in [0, 1) (0 = no EMA of the weights; e.g. 0.999), got '
                     f'{config.ema.decay!r}')
  if not 0 <= config.log.peak_device_tflops < math.inf:  # NaN fails too
    raise ValueError(f'config.log.peak_device_tflops must be a finite number >= 0 (TFLOP/s per device; 0 = the '
                     f"device's published peak), got {config.log.peak_device_tflops!r}")
  if num_devices is not None and config.batch_size % num_devices:
    raise ValueError(f'config.batch_size={config.batch_size} must be divisible by the device count {num_devices}')
  if num_devices is not None and num_devices % config.mesh.fsdp:
    raise ValueError(f'config.mesh.fsdp={config.mesh.fsdp} must divide the device count {num_devices}')
  _check_timeouts(config)
  if config.init.require_checkpoint and not config.init.checkpoint:  # last: the other checks run before it
    raise MissingInputError('config.init.checkpoint is required by this config (continue pre-training): import '
                            'weights with `python -m vlp_jax.weights import --format=openai --model=ViT-B-32 '
                            '--input=FILE --output=DIR` and pass --config.init.checkpoint=DIR')


def _check_timeouts(config: ml_collections.ConfigDict) -> None:
  """config.distributed's timeouts are positive, config.watchdog's >= 0 (0 = off); the peer monitor names a stopped
  peer before jax's heartbeat check could abort every process (parallel.jax_abort_earliest_seconds)."""
  for section, least in (('distributed', 1), ('watchdog', 0)):
    for key, value in config[section].items():
      if not isinstance(value, (int, float)) or isinstance(value, bool) or not least <= value < math.inf:
        raise ValueError(f'config.{section}.{key} must be a number of seconds >= {least}'
                         + (' (0 = off)' if not least else '') + f', got {value!r}')
  peer, heartbeat = config.watchdog.peer_timeout_seconds, config.distributed.heartbeat_timeout_seconds
  named, aborted = parallel.peer_named_latest_seconds(peer), parallel.jax_abort_earliest_seconds(heartbeat)
  if peer and named >= aborted:
    poll = parallel.peer_poll_seconds(peer)
    raise ValueError(
        f'config.watchdog.peer_timeout_seconds={peer:g} names a stopped peer up to {named:g} s after it stops '
        f'(the timeout + 2 polls of {poll:g} s + {parallel.PEER_MONITOR_SLACK_SECONDS:g} s), but jax aborts every '
        f'process as soon as {aborted:g} s after it (config.distributed.heartbeat_timeout_seconds={heartbeat:g} / '
        f'{parallel.HEARTBEATS_PER_TIMEOUT}: a heartbeat every half timeout); the bound: peer_timeout_seconds + '
        f'2 polls + {parallel.PEER_MONITOR_SLACK_SECONDS:g} s < heartbeat_timeout_seconds / '
        f'{parallel.HEARTBEATS_PER_TIMEOUT}. Lower config.watchdog.peer_timeout_seconds (at most '
        f'{parallel.longest_peer_timeout_seconds(heartbeat)} here) or raise config.distributed.heartbeat_timeout_seconds')


def advisories(config: ml_collections.ConfigDict) -> list[str]:
  """Warnings about a valid config that is likely not what its author wants, one line each; [] when none apply.

  Printed at start by `python -m vlp_jax.main`, never raised: the config may be deliberate.
  """
  lines = []
  optim, total = config.optim, config.total_steps
  if optim.warmup_steps > total:  # a short smoke run of a real config: allowed, but the lr never reaches its peak
    last_lr = optim.warmup_init_lr + (optim.lr - optim.warmup_init_lr) * total / optim.warmup_steps
    lines.append(f'warning: config.optim.warmup_steps={optim.warmup_steps} is more than config.total_steps={total}: '
                 f'the learning rate warms up for the whole run and ends at {last_lr:.3g}, below config.optim.lr='
                 f'{optim.lr:g}; fine for a smoke run, else add --config.optim.warmup_steps=N with N <= {total}')
  if config.model.get('scan_layers', False) and not config.model.remat:
    # Scanned without remat, the backward pass keeps every block's residuals stacked (benchmarks/RESULTS.md: clip_cc3m
    # on v5e:4x4 needs 13.6 GiB of temporaries scanned, 4.0 unrolled, 1.5 scanned with remat).
    lines.append('warning: config.model.scan_layers=True without config.model.remat keeps every block\'s activations '
                 'for the backward pass, usually more memory than the unrolled blocks; add --config.model.remat=True')
  return lines


def _check_tower_options(config: ml_collections.ConfigDict) -> None:
  """The locked-tower and layer-decay keys of config.optim, against the towers they apply to."""
  optim, vision = config.optim, config.model.vision
  transformer = {'image': vision_tower(vision).layer_groups, 'text': True}  # towers whose blocks make layer groups
  depths = {'image': vision.layers, 'text': config.model.text.layers}
  keys = (('image', 'lock_image', 'lock_image_unlocked_groups', 'image_layer_decay'),
          ('text', 'lock_text', 'lock_text_unlocked_layers', 'text_layer_decay'))
  for tower, lock, unlocked_key, decay_key in keys:
    unlocked, decay, groups = optim[unlocked_key], optim[decay_key], depths[tower] + 2
    if not isinstance(unlocked, int) or isinstance(unlocked, bool) or unlocked < 0:
      raise ValueError(f'config.optim.{unlocked_key} must be an integer >= 0 (how many of the last layer groups '
                       f'of the {tower} tower stay trainable), got {unlocked!r}')
    if unlocked and not optim[lock]:
      raise ValueError(f'config.optim.{unlocked_key}={unlocked} applies only to a locked tower; set '
                       f'config.optim.{lock}=True, or leave it at 0')
    if unlocked and not transformer[tower]:
      raise ValueError(f"config.optim.{unlocked_key}={unlocked}: a config.model.vision.type='{vision.type}' tower "
                       'has no layer groups and locks whole (as in open_clip); leave it at 0')
    if unlocked > groups:
      raise ValueError(f'config.optim.{unlocked_key}={unlocked} is more than the {groups} layer groups of the '
                       f'{tower} tower ({depths[tower]} blocks + the embeddings + the projection)')
    if not 0 < decay <= 1:  # NaN fails too
      raise ValueError(f'config.optim.{decay_key} must be in (0, 1] (1 = no layer-wise lr decay), got {decay!r}')
    if decay != 1 and not transformer[tower]:
      raise ValueError(f"config.optim.{decay_key}={decay}: a config.model.vision.type='{vision.type}' tower has no "
                       'transformer layers to decay by; leave it at 1.0')
