"""What evaluating a config costs a host, estimated before any eval set is read: the images each process holds in
memory, the images it decodes again at every evaluation (sets streamed because they would not fit, evalsets/
streamed.py), and the texts it encodes, per set of `config.eval.datasets`.

The counts are the sets' published sizes (EVAL_SPLIT_SIZES); a set not listed there is reported as unknown rather
than guessed. The loaders in tfds.py, flickr30k.py and synthetic.py decide what is held and what is streamed; the
rules here follow theirs. `host_memory` puts these figures together with the mapped files' into what the run holds
outside the devices, checked at start before any eval set loads (training/loop.py).
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.loading.host_memory import HostMemory
from vlp_jax.data.sources import tfds_splits as tfds_data
from vlp_jax.evalsets import prompts
from vlp_jax.evalsets.flickr30k import CAPTIONS_PER_IMAGE as FLICKR30K_CAPTIONS_PER_IMAGE
from vlp_jax.evalsets.synthetic import NOVEL_SUFFIX
from vlp_jax.evalsets.tfds import DEFAULT_MAX_CAPTIONS_PER_IMAGE, DEFAULT_MEMORY_LIMIT_BYTES, TEMPLATES

# Examples per split as published: {(set, split): (images, captions per image, classes)}; 'test' is what
# config.eval.split='test' reads (ImageNet's validation set, Karpathy's test splits), 'train' what the probe fits on.
EVAL_SPLIT_SIZES: dict[tuple[str, str], tuple[int, int, int]] = {
    ('imagenet2012', 'test'): (50_000, 0, 1000), ('imagenet2012', 'train'): (1_281_167, 0, 1000),
    ('coco_captions', 'test'): (5_000, DEFAULT_MAX_CAPTIONS_PER_IMAGE, 0),
    ('coco_captions', 'val'): (5_000, DEFAULT_MAX_CAPTIONS_PER_IMAGE, 0),
    ('flickr30k', 'test'): (1_000, FLICKR30K_CAPTIONS_PER_IMAGE, 0),
    ('flickr30k', 'val'): (1_014, FLICKR30K_CAPTIONS_PER_IMAGE, 0),
    ('cifar10', 'test'): (10_000, 0, 10), ('cifar10', 'train'): (50_000, 0, 10),
    ('cifar100', 'test'): (10_000, 0, 100), ('cifar100', 'train'): (50_000, 0, 100),
}
PROBE_TASKS = ('linear_probe', 'referring')  # the tasks for which a set also loads its train examples (evalsets)


def image_bytes(image_size: int) -> int:
  """Bytes of one eval image as the evaluators hold it: [S, S, 3] float32."""
  return image_size * image_size * 3 * 4


def held_bytes(examples: int, image_size: int) -> int:
  """Host bytes of `examples` images held as one [N, S, S, 3] float32 array (the probe's train images, an eval
  split that fits)."""
  return examples * image_bytes(image_size)


def capped(available: int, cap: int) -> int:
  """How many of `available` examples a count key such as config.data.probe_train_examples keeps (0 = all)."""
  return min(available, cap) if cap else available


@dataclasses.dataclass(frozen=True)
class SetCost:
  """One eval set's cost to each process. images / probe_images: how many it evaluates / fits the probe on;
  held_bytes: float32 images it keeps in host memory between evaluations; decoded_per_eval: images decoded again
  at every evaluation (streamed); texts: captions and zero-shot prompts encoded at every evaluation. None: unknown
  (a set without a published size here)."""
  name: str
  images: int | None
  probe_images: int
  held_bytes: int | None
  decoded_per_eval: int | None
  texts: int | None


def _synthetic_sizes(data: ml_collections.ConfigDict, name: str, split: str) -> tuple[int, int]:
  """(eval images, train images) of the embedded dataset's set `name` for `data.synthetic`."""
  spec = synthetic.spec_from_config(data)
  sources = len(spec.sources) if name in ('synthetic', 'synthetic_long') else 1  # the others: one source each
  return spec.num_examples(split) * sources, spec.num_examples('train') * sources


def set_cost(name: str, config: ml_collections.ConfigDict) -> SetCost:
  """The cost of eval set `name` under `config` (its image size, eval split, caps and tasks)."""
  data, size, split = config.data, config.model.vision.image_size, config.eval.split
  probe = bool(set(PROBE_TASKS) & set(config.eval.tasks))
  if name.startswith('synthetic'):
    base = name.removesuffix(NOVEL_SUFFIX)  # the set a novel one restricts: its probe, an upper bound on its images
    images, train = _synthetic_sizes(data, base, split)
    probe_images = capped(train, data.probe_train_examples) if probe and base == 'synthetic' else 0
    classes = len(synthetic.CLASS_NAMES) if base == 'synthetic' else 0
    texts = images + classes * len(prompts.SYNTHETIC_TEMPLATES)
    return SetCost(name, images, probe_images, held_bytes(images + probe_images, size), 0, texts)
  if (name, split) not in EVAL_SPLIT_SIZES:
    return SetCost(name, None, 0, None, None, None)
  count, captions, classes = EVAL_SPLIT_SIZES[(name, split)]
  images = capped(count, data.eval_max_examples)
  probe_images = 0
  if probe and classes and (name, 'train') in EVAL_SPLIT_SIZES:
    probe_images = capped(EVAL_SPLIT_SIZES[(name, 'train')][0], data.probe_train_examples)
  templates = len(TEMPLATES.get(name, prompts.SIMPLE_TEMPLATES)) if config.eval.templates == 'dataset' else \
      len(prompts.TEMPLATE_SETS.get(config.eval.templates))
  texts = images * captions + classes * templates
  # tfds.py holds a split in memory up to its limit and streams a larger one; flickr30k.py always streams
  streamed = name == 'flickr30k' or held_bytes(images, size) > DEFAULT_MEMORY_LIMIT_BYTES
  probe_streamed = held_bytes(probe_images, size) > DEFAULT_MEMORY_LIMIT_BYTES
  held = (0 if streamed else held_bytes(images, size)) + (0 if probe_streamed else held_bytes(probe_images, size))
  decoded = (images if streamed else 0) + (probe_images if probe_streamed else 0)
  return SetCost(name, images, probe_images, held, decoded, texts)


def eval_costs(config: ml_collections.ConfigDict) -> list[SetCost]:
  """`set_cost` of every set of config.eval.datasets."""
  return [set_cost(name, config) for name in config.eval.datasets]


def probe_host_bytes(config: ml_collections.ConfigDict) -> int:
  """Host bytes per process of the linear probe's train images over every eval set of `config` (held or, above the
  in-memory limit, decoded at each evaluation: either way that many images per evaluation)."""
  return sum(held_bytes(cost.probe_images, config.model.vision.image_size) for cost in eval_costs(config))


def host_memory(config: ml_collections.ConfigDict, mapped_bytes: dict[str, int]) -> HostMemory:
  """What a run of `config` holds outside the devices, before any eval set is read: `mapped_bytes` ({part: bytes} of
  the memory-mapped files, once per host: the webdataset index, the teacher table) and the eval images each process
  holds (`eval_costs`); a set of unknown size is named, not counted."""
  costs = eval_costs(config)
  held = sum(cost.held_bytes for cost in costs if cost.held_bytes is not None)
  return HostMemory(dict(mapped_bytes), {'eval sets': held},
                    not_counted=tuple(cost.name for cost in costs if cost.held_bytes is None))
