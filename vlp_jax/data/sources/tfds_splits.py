"""tensorflow-datasets read without TensorFlow: the examples of a prepared split (for the eval sets of
evalsets/tfds.py) and a split written once as training shards (`tfds:NAME:SPLIT` sources).

`tfds.data_source` reads a dataset prepared in a random-access format (array_record, or parquet) with numpy and
PIL only. Preparing it (`tfds build`) does need TensorFlow, once, in any environment that has it: tfds encodes the
images and builds the COCO features with TensorFlow ops. The error raised for a dataset that is not prepared gives
the exact command.

  tfds name      config  eval split  image   label  captions       key         splits
  imagenet2012   -       validation  image   label  -              file_name   train, validation, test (unlabelled)
  cifar10        -       test        image   label  -              id          train, test
  cifar100       -       test        image   label  -              id          train, test
  caltech101     -       test        image   label  -        image/file_name   train, test
  oxford_iiit_pet -      test        image   label  -              file_name   train, test
  oxford_flowers102 -    test        image   label  -              file_name   train, validation, test
  coco_captions  2014    test        image   -      captions/text  image/id    train, val, test, restval (Karpathy)
  imagenet_v2    matched-frequency test image label -              file_name   test
  imagenet2012_real -    validation  image   original_label (+ real_label, a list)  file_name  validation
  imagenet_r     -       test        image   label  -              file_name   test (200 of the 1,000 classes)
  imagenet_a     -       test        image   label  -              file_name   test (200 of the 1,000 classes)
  imagenet_sketch -      test        image   label  -              file_name   test

The ImageNet variants label over tfds's imagenet2012 class list (labels.txt, the sorted WordNet ids) and get
OpenAI CLIP's curated class names. ImageNet-R and -A use 200 of those classes: their labels come out as positions
among the 200 (class_names.IMAGENET_R_WNIDS / IMAGENET_A_WNIDS) and their class names are those 200, so that
zero-shot classifies among the 200 only, as CLIP's evaluation does. imagenet2012_real (ImageNet's validation images
with the ReaL labels of Beyer et al. 2020) also gives each example's 'label_set': its real labels, possibly none.

Examples come out in the schema of `to_example`: {'image': [H, W, 3] uint8 RGB, 'label': int (-1 when unlabelled),
'captions': list[str] ([] for class datasets), 'key': str (the dataset's own example id)}.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Mapping, Sequence

from etils import epath
import grain
import numpy as np
import tensorflow_datasets as tfds

from vlp_jax.data.sources import class_names as class_names_lib
from vlp_jax.data.storage import records
from vlp_jax.errors import DataNotFoundError

# Formats tfds.data_source can read at random (without TensorFlow).
RANDOM_ACCESS_FORMATS = tuple(sorted(f.value for f in tfds.core.file_adapters.FileFormat.with_random_access()))


@dataclasses.dataclass(frozen=True)
class TfdsDataset:
  """Where the fields of one tfds dataset are. Keys are top-level feature names ('image/id' is one name)."""
  name: str
  config: str  # builder config, '' when the dataset has none
  eval_split: str
  splits: tuple[str, ...]
  image_key: str
  label_key: str  # '' when unlabelled
  caption_path: tuple[str, ...]  # nested keys of the caption strings, () when there are none
  key_feature: str
  manual_download: str = ''  # what to download by hand into --manual_dir, '' when tfds downloads everything
  # ImageNet WordNet ids the labels are restricted to (labels become positions among them), () for all classes
  label_subset: tuple[str, ...] = ()
  label_set_key: str = ''  # a Sequence(ClassLabel) feature: every correct label of an example ('' when none)


DATASETS: dict[str, TfdsDataset] = {
    'imagenet2012': TfdsDataset(
        name='imagenet2012', config='', eval_split='validation', splits=('train', 'validation', 'test'),
        image_key='image', label_key='label', caption_path=(), key_feature='file_name',
        manual_download=('ILSVRC2012_img_val.tar (and ILSVRC2012_img_train.tar for the train split), which needs '
                         'an account at https://image-net.org/download-images')),
    'cifar10': TfdsDataset(
        name='cifar10', config='', eval_split='test', splits=('train', 'test'), image_key='image', label_key='label',
        caption_path=(), key_feature='id'),
    'cifar100': TfdsDataset(
        name='cifar100', config='', eval_split='test', splits=('train', 'test'), image_key='image',
        label_key='label', caption_path=(), key_feature='id'),
    # the papers report mean-per-class accuracy on these three (zeroshot_mean_per_class).
    'caltech101': TfdsDataset(
        name='caltech101', config='', eval_split='test', splits=('train', 'test'), image_key='image',
        label_key='label', caption_path=(), key_feature='image/file_name'),
    'oxford_iiit_pet': TfdsDataset(
        name='oxford_iiit_pet', config='', eval_split='test', splits=('train', 'test'), image_key='image',
        label_key='label', caption_path=(), key_feature='file_name'),
    'oxford_flowers102': TfdsDataset(
        name='oxford_flowers102', config='', eval_split='test', splits=('train', 'validation', 'test'),
        image_key='image', label_key='label', caption_path=(), key_feature='file_name'),
    'coco_captions': TfdsDataset(
        name='coco_captions', config='2014', eval_split='test', splits=('train', 'val', 'test', 'restval'),
        image_key='image', label_key='', caption_path=('captions', 'text'), key_feature='image/id'),
    # ImageNet's distribution shifts, test sets only (evaluated zero-shot with ImageNet's names and prompts).
    'imagenet_v2': TfdsDataset(
        name='imagenet_v2', config='matched-frequency', eval_split='test', splits=('test',), image_key='image',
        label_key='label', caption_path=(), key_feature='file_name'),
    'imagenet2012_real': TfdsDataset(
        name='imagenet2012_real', config='', eval_split='validation', splits=('validation',), image_key='image',
        label_key='original_label', caption_path=(), key_feature='file_name', label_set_key='real_label',
        manual_download=('ILSVRC2012_img_val.tar, which needs an account at https://image-net.org/download-images '
                         '(tfds downloads the ReaL labels itself)')),
    'imagenet_r': TfdsDataset(
        name='imagenet_r', config='', eval_split='test', splits=('test',), image_key='image', label_key='label',
        caption_path=(), key_feature='file_name', label_subset=class_names_lib.IMAGENET_R_WNIDS),
    'imagenet_a': TfdsDataset(
        name='imagenet_a', config='', eval_split='test', splits=('test',), image_key='image', label_key='label',
        caption_path=(), key_feature='file_name', label_subset=class_names_lib.IMAGENET_A_WNIDS),
    'imagenet_sketch': TfdsDataset(
        name='imagenet_sketch', config='', eval_split='test', splits=('test',), image_key='image', label_key='label',
        caption_path=(), key_feature='file_name'),
}
# Datasets labelled with ImageNet's WordNet ids, which get CLIP's curated ImageNet names and prompts.
IMAGENET_FAMILY = ('imagenet2012', 'imagenet_v2', 'imagenet2012_real', 'imagenet_r', 'imagenet_a', 'imagenet_sketch')


def dataset_spec(name: str) -> TfdsDataset:
  if name not in DATASETS:
    raise ValueError(f"tfds dataset '{name}' is not supported; valid choices: {sorted(DATASETS)}")
  return DATASETS[name]


def resolve_data_dir(data_dir: str | None) -> str:
  """The tfds data directory: `data_dir`, else $TFDS_DATA_DIR, else ~/tensorflow_datasets (as tfds does)."""
  return str(epath.Path(data_dir or tfds.core.constants.get_default_data_dir()).expanduser())


def build_instructions(spec: TfdsDataset, data_dir: str) -> str:
  """How to prepare the dataset in `data_dir` in a format that reads without TensorFlow."""
  full_name = f'{spec.name}/{spec.config}' if spec.config else spec.name
  command = f'tfds build {full_name} --data_dir={data_dir} --file_format=array_record'
  if spec.manual_download:
    command += ' --manual_dir=MANUAL_DIR'
  lines = ['Prepare it once, in any environment with TensorFlow (tfds needs it to write the files; reading them here '
           'does not):', '  pip install tensorflow tensorflow-datasets']
  if spec.manual_download:
    lines.append(f'  # put {spec.manual_download} into MANUAL_DIR')
  lines.append(f'  {command}')
  return '\n'.join(lines)


def prepared_version_dir(spec: TfdsDataset, data_dir: str) -> epath.Path | None:
  """The newest prepared version of the dataset, data_dir/name[/config]/version, or None when there is none.

  tfds writes into an `incomplete.*` folder and renames it when done, so a version folder with a dataset_info.json
  is complete.
  """
  root = epath.Path(data_dir) / spec.name
  if spec.config:
    root = root / spec.config
  if not root.is_dir():
    return None
  versions = [tfds.core.Version(p.name) for p in root.iterdir()
              if tfds.core.Version.is_valid(p.name) and (p / 'dataset_info.json').exists()]
  return root / str(max(versions)) if versions else None


def file_formats(info: Mapping[str, Any]) -> set[str]:
  """The file formats a prepared dataset is stored in, from its dataset_info.json ({} means TFRecord)."""
  return {info.get('fileFormat') or 'tfrecord', *info.get('alternativeFileFormats', ())}


def preparation_problem(name: str, split: str | None, data_dir: str | None) -> str | None:
  """Why split `split` (None: the eval split) of tfds dataset `name` cannot be read from `data_dir` without
  TensorFlow, with the command that prepares it; None when it can. Reads only dataset_info.json. ValueError for an
  unknown dataset or split."""
  spec = dataset_spec(name)
  split = split or spec.eval_split
  if split not in spec.splits:
    raise ValueError(f"'{split}' is not a split of tfds dataset {name}; valid choices: {list(spec.splits)}")
  data_dir = resolve_data_dir(data_dir)
  version_dir = prepared_version_dir(spec, data_dir)
  if version_dir is None:
    return f'tfds dataset {name} is not prepared in {data_dir}.\n{build_instructions(spec, data_dir)}'
  info = json.loads((version_dir / 'dataset_info.json').read_text())
  formats = file_formats(info)
  if not formats & set(RANDOM_ACCESS_FORMATS):
    return (f'tfds dataset {name} is prepared in {version_dir} as {sorted(formats)}, which only TensorFlow can read; '
            f'reading without TensorFlow needs one of {list(RANDOM_ACCESS_FORMATS)}. Convert it once, in any '
            f'environment with TensorFlow:\n  tfds convert_format --dataset_version_dir={version_dir} '
            f'--out_file_format=array_record\nor rebuild it with --overwrite:\n{build_instructions(spec, data_dir)} '
            '--overwrite')
  prepared_splits = [s['name'] for s in info.get('splits', ())]
  if split not in prepared_splits:
    return (f"tfds dataset {name} in {version_dir} has the splits {prepared_splits}, not '{split}'.\n"
            f'{build_instructions(spec, data_dir)}')
  return None


def open_source(name: str, split: str | None, data_dir: str | None) -> Sequence[dict[str, Any]]:
  """A random-access sequence of the raw tfds examples of a prepared split (tfds's ArrayRecordDataSource).

  Images are left encoded (bytes; `to_example` decodes them). split: None for the dataset's eval split.
  Raises errors.DataNotFoundError, with the command that prepares it, when the split is not prepared in data_dir
  in a random-access format; ValueError for an unknown dataset or split.
  """
  problem = preparation_problem(name, split, data_dir)
  if problem:
    raise DataNotFoundError(problem)
  spec = dataset_spec(name)
  split, data_dir = split or spec.eval_split, resolve_data_dir(data_dir)
  version_dir = prepared_version_dir(spec, data_dir)
  # The version pin makes tfds read the prepared files rather than construct the builder code, which needs
  # TensorFlow for coco_captions. SkipDecoding: PIL decodes in to_example (grayscale and CMYK become RGB).
  full_name = f"{spec.name}{'/' + spec.config if spec.config else ''}:{version_dir.name}"
  return tfds.data_source(full_name, split=split, data_dir=data_dir, download=False,
                          decoders={spec.image_key: tfds.decode.SkipDecoding()})


def _text(value: Any) -> str:
  """A tfds string or id (bytes, str, int or a 0-d numpy array) -> str."""
  value = value.item() if isinstance(value, np.ndarray | np.generic) else value
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def rgb_image(value: bytes | np.ndarray) -> np.ndarray:
  """Encoded image bytes, or a decoded [H, W], [H, W, 1] or [H, W, 3] array -> [H, W, 3] uint8 RGB."""
  if isinstance(value, bytes):  # np.bytes_ too
    return records.decode_image(bytes(value))
  image = np.asarray(value, np.uint8)
  if image.ndim == 2:
    image = image[:, :, None]
  if image.ndim != 3 or image.shape[-1] not in (1, 3):
    raise ValueError(f'expected an [H, W, 3] or grayscale image, got shape {image.shape}')
  return np.repeat(image, 3, axis=-1) if image.shape[-1] == 1 else image


def _nested(features: Mapping[str, Any], path: tuple[str, ...]) -> Any:
  for key in path:
    features = features[key]
  return features


def to_example(name: str, features: Mapping[str, Any]) -> dict[str, Any]:
  """A tfds example of dataset `name` -> {'image': [H, W, 3] uint8, 'label': int, 'captions': list[str], 'key': str}.

  Accepts the examples of `open_source` (encoded image, bytes strings) and tfds's fully decoded ones.
  """
  return {'image': rgb_image(features[dataset_spec(name).image_key]), **example_fields(name, features)}


@functools.cache
def imagenet_wnids() -> tuple[str, ...]:
  """tfds's imagenet2012 label names: the 1,000 WordNet ids in the standard class order ('n01440764', ...)."""
  return tuple(epath.Path(tfds.core.tfds_path('datasets/imagenet2012/labels.txt')).read_text().split())


@functools.cache
def subset_positions(name: str) -> dict[int, int]:
  """A dataset with a label_subset: its tfds labels (ImageNet-1k indices, the order of `imagenet_wnids`) -> their
  positions among the subset ({} for datasets labelled over all their classes)."""
  subset = dataset_spec(name).label_subset
  if not subset:
    return {}
  index = {wnid: i for i, wnid in enumerate(imagenet_wnids())}
  return {index[wnid]: position for position, wnid in enumerate(subset)}


def readable_class_names(name: str, label_names: Sequence[str]) -> tuple[str, ...]:
  """tfds ClassLabel names -> words for prompts: ImageNet WordNet ids to OpenAI CLIP's curated class names
  ('n01440764' -> 'tench'; ids outside the standard 1,000 are kept), Caltech-101's folder names that are not words
  as CLIP names them, other datasets' underscores to spaces."""
  if name in IMAGENET_FAMILY:
    curated = dict(zip(imagenet_wnids(), class_names_lib.IMAGENET_CLASS_NAMES, strict=True))
    return tuple(curated.get(n, n) for n in label_names)
  renames = class_names_lib.CALTECH101_RENAMES if name == 'caltech101' else {}
  return tuple(renames.get(n, n.replace('_', ' ')) for n in label_names)


def class_names(name: str, source: Any) -> tuple[str, ...]:
  """The readable class names of an `open_source` sequence (its prepared ClassLabel), () when unlabelled."""
  spec = dataset_spec(name)
  if not spec.label_key:
    return ()
  names = source.dataset_info.features[spec.label_key].names
  if spec.label_subset:  # the subset's classes only, in the order of its label positions
    names = [names[i] for i in subset_positions(name)]
  return readable_class_names(name, names)


def _label(name: str, value: Any) -> int:
  """A tfds label -> ours: itself, or for a dataset with a label_subset its position among the subset."""
  label, positions = int(value), subset_positions(name)
  if not positions:
    return label
  if label not in positions:
    raise ValueError(f'{name}: label {label} ({imagenet_wnids()[label]}) is not one of its {len(positions)} classes')
  return positions[label]


def example_fields(name: str, features: Mapping[str, Any]) -> dict[str, Any]:
  """The label (-1 when unlabelled), captions and key of a tfds example of dataset `name`, without its image; and
  'label_set' (a list of labels, maybe empty) for a dataset with several correct labels per example (ReaL)."""
  spec = dataset_spec(name)
  fields = {'label': _label(name, features[spec.label_key]) if spec.label_key else -1,
            'captions': [_text(c) for c in _nested(features, spec.caption_path)] if spec.caption_path else [],
            'key': _text(features[spec.key_feature])}
  if spec.label_set_key:
    fields['label_set'] = [int(v) for v in np.asarray(features[spec.label_set_key]).reshape(-1)]
  return fields


def training_record(name: str, features: Mapping[str, Any], class_names_: Sequence[str]) -> dict[str, Any]:
  """A raw `open_source` example -> a record of our schema (records.py), the image bytes kept as tfds stored them.

  Caption datasets: the first caption, with every caption joined as the long caption (sentences for COSMOS text
  crops). Class datasets: 'a photo of a {class}.' and the label.
  """
  spec = dataset_spec(name)
  captions = [_text(c) for c in _nested(features, spec.caption_path)] if spec.caption_path else []
  label = _label(name, features[spec.label_key]) if spec.label_key else -1
  caption = captions[0] if captions else f'a photo of a {class_names_[label]}.'
  return {'image': bytes(features[spec.image_key]), 'caption': caption,
          'long_caption': ' '.join(c.strip().rstrip('.') + '.' for c in captions), 'label': label, 'source': name,
          'key': f'{name}/{_text(features[spec.key_feature])}'}


def training_shards(name: str, split: str, data_dir: str | None, cache_dir: str, examples_per_shard: int = 10000,
                    verbose: bool = True) -> list[str]:
  """A prepared tfds split as ArrayRecord shards of our schema (written once into `cache_dir`, like the embedded
  dataset), so that it trains, mixes and resumes like any other source. Returns the shard paths."""
  spec = dataset_spec(name)
  source = open_source(name, split, data_dir)
  version_dir = prepared_version_dir(spec, resolve_data_dir(data_dir))
  digest = hashlib.sha256(f'{version_dir}|{split}|{len(source)}'.encode()).hexdigest()[:12]
  root = os.path.join(cache_dir, f'tfds-{name}-{split}-{digest}')
  done = os.path.join(root, 'done')
  if not os.path.exists(done):
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f'.tfds-{name}-tmp-', dir=cache_dir)
    try:
      if verbose:
        print(f'Writing tfds {name}:{split} ({len(source)} examples) as training shards into {root} ...', flush=True)
      names = class_names(name, source)
      num_shards = max(1, -(-len(source) // examples_per_shard))
      records.write_shards((training_record(name, source[i], names) for i in range(len(source))), tmp, split,
                           len(source), num_shards)
      open(os.path.join(tmp, 'done'), 'w').close()
      try:
        os.rename(tmp, root)
      except OSError:  # another process finished first
        if not os.path.exists(done):
          raise
    finally:
      shutil.rmtree(tmp, ignore_errors=True)
  return sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith('.array_record'))


def examples_dataset(name: str, split: str | None, data_dir: str | None) -> grain.MapDataset:
  """A grain MapDataset of the `to_example` dicts of a prepared split, for streaming (e.g. as a training source)."""
  return grain.MapDataset.source(open_source(name, split, data_dir)).map(functools.partial(to_example, name))
