"""tfds evaluation sets read without TensorFlow, through the real tfds.data_source path.

tfds.testing.mock_data replaces the ArrayRecord reader and the example decoder, and cannot mock coco_captions
without TensorFlow (its builder code uses tf.int64), so these tests prepare tiny real datasets instead: builders
with the real names, versions, configs and features, written as array_record. tfds encodes image arrays with
TensorFlow, so the fake examples give their images already encoded (PNG / JPEG bytes), as the real builders of
imagenet2012 and coco_captions do with their image files.
"""
import dataclasses
import io
import json

import grain
import jax
import numpy as np
from PIL import Image
import pytest
import tensorflow_datasets as tfds

from vlp_jax.objectives import views
from vlp_jax import errors
from vlp_jax import evalsets
from vlp_jax import models, parallel
from vlp_jax.data.formats import train_paths
from vlp_jax.data.image import image_ops
from vlp_jax.data.loading import mixing
from vlp_jax.data.loading import pipeline
from vlp_jax.data.sources import tfds_splits as tfds_sets
from vlp_jax.data.sources import class_names
from vlp_jax.evalsets import prompts as templates
from vlp_jax.evalsets import tfds as tfds_eval_sets
from vlp_jax.evalsets.streamed import StreamedImages
from vlp_jax.evaluation import EVALUATORS, Encoder, linear_probe, run_evaluations, with_templates

CIFAR10_NAMES = ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck']
CIFAR100_NAMES = ['apple', 'aquarium_fish', 'baby', 'maple_tree', 'sweet_pepper']  # the first and some of the 100
COCO_CAPTION_COUNTS = (5, 7, 5)  # a few Karpathy test images have more than 5 captions
IMAGENET_LABELS = (0, 1, 999, 500)
IMAGENET_SIZES = ((40, 56), (64, 48), (33, 33), (50, 70))  # (height, width); image 2 is grayscale


def _encode(array: np.ndarray, image_format: str) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(array).save(buffer, format=image_format)
  return buffer.getvalue()


def _builder(dataset_name: str, version: str, config: str, features, splits: dict):
  """A tfds builder named, versioned and configured like the real dataset, generating the given examples."""

  class FakeBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version(version)
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config)] if config else []

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
      return {split: self._generate_examples(examples) for split, examples in splits.items()}

    def _generate_examples(self, examples):
      yield from enumerate(examples)

  FakeBuilder.name = dataset_name
  return FakeBuilder


def _cifar(name: str, label_names: list[str], rng: np.random.Generator, num_train: int = 0):
  """7 test examples, and `num_train` train examples when > 0 (cifar10 is prepared without its train split)."""
  extra = {'coarse_label': tfds.features.ClassLabel(names=['aquatic_mammals', 'fish'])} if name == 'cifar100' else {}
  features = tfds.features.FeaturesDict({
      'id': tfds.features.Text(), 'image': tfds.features.Image(shape=(32, 32, 3)),
      'label': tfds.features.ClassLabel(names=label_names), **extra})
  splits, truth = {}, {}
  for split, count in (('test', 7), ('train', num_train)):
    if not count:
      continue
    images = rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)
    labels = [i % len(label_names) for i in range(count)]
    splits[split] = [{'id': f'{split}_{i:05d}', 'image': _encode(images[i], 'PNG'), 'label': labels[i],
                      **({'coarse_label': i % 2} if extra else {})} for i in range(count)]
    truth.update({'images': images, 'labels': labels} if split == 'test' else {'train_labels': labels})
  return _builder(name, '3.0.2', '', features, splits), truth


def _imagenet(rng: np.random.Generator):
  images = []
  for i, (height, width) in enumerate(IMAGENET_SIZES):  # smooth gradients, which JPEG keeps well
    colour = rng.integers(0, 128, 1 if i == 2 else 3)
    ramp = np.add.outer(np.arange(height), np.arange(width))[:, :, None]
    images.append(np.clip(colour + ramp, 0, 255).astype(np.uint8).squeeze())
  features = tfds.features.FeaturesDict({
      'image': tfds.features.Image(encoding_format='jpeg'),
      'label': tfds.features.ClassLabel(names_file=tfds.core.tfds_path('datasets/imagenet2012/labels.txt')),
      'file_name': tfds.features.Text()})
  examples = [{'image': _encode(image, 'JPEG'), 'label': label, 'file_name': f'ILSVRC2012_val_{i + 1:08d}.JPEG'}
              for i, (image, label) in enumerate(zip(images, IMAGENET_LABELS))]
  return _builder('imagenet2012', '5.1.0', '', features, {'validation': examples}), {'images': images}


def _coco(rng: np.random.Generator):
  features = tfds.features.FeaturesDict({  # the real one also has 'objects' (boxes), which is not read
      'image': tfds.features.Image(encoding_format='jpeg'), 'image/filename': tfds.features.Text(),
      'image/id': np.int64, 'captions': tfds.features.Sequence({'text': np.str_, 'id': np.int64})})
  examples = [{'image': _encode(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), 'JPEG'),
               'image/filename': f'COCO_val2014_{100 + i:012d}.jpg', 'image/id': 100 + i,
               'captions': [{'text': f'image {i} caption {j}', 'id': 10 * i + j} for j in range(count)]}
              for i, count in enumerate(COCO_CAPTION_COUNTS)]
  return _builder('coco_captions', '1.1.0', '2014', features, {'test': examples}), {}


PET_NAMES = ['Abyssinian', 'american_bulldog', 'beagle']
PET_LABELS = (0, 0, 0, 0, 1, 2)  # imbalanced: mean-per-class accuracy differs from top-1


def _pets(rng: np.random.Generator):
  features = tfds.features.FeaturesDict({  # the real one also has species, a mask and a head box, not read
      'image': tfds.features.Image(encoding_format='jpeg'), 'label': tfds.features.ClassLabel(names=PET_NAMES),
      'file_name': tfds.features.Text()})
  examples = [{'image': _encode(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8), 'JPEG'), 'label': label,
               'file_name': f'{PET_NAMES[label]}_{i}.jpg'} for i, label in enumerate(PET_LABELS)]
  return _builder('oxford_iiit_pet', '4.0.0', '', features, {'test': examples}), {}


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
  """(data_dir, {dataset: what was written}) with the four datasets prepared as array_record."""
  tfds.disable_progress_bar()
  data_dir = str(tmp_path_factory.mktemp('tfds_data'))
  rng = np.random.default_rng(0)
  written = {}
  for name, (builder_cls, truth) in {'cifar10': _cifar('cifar10', CIFAR10_NAMES, rng),
                                     'cifar100': _cifar('cifar100', CIFAR100_NAMES, rng, num_train=12),
                                     'imagenet2012': _imagenet(rng), 'coco_captions': _coco(rng),
                                     'oxford_iiit_pet': _pets(rng)}.items():
    builder = builder_cls(data_dir=data_dir, file_format='array_record')
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    written[name] = truth
  return data_dir, written


def test_table_names_the_datasets_and_their_eval_splits():
  assert {n: s.eval_split for n, s in tfds_sets.DATASETS.items()} == {
      'imagenet2012': 'validation', 'cifar10': 'test', 'cifar100': 'test', 'caltech101': 'test',
      'oxford_iiit_pet': 'test', 'oxford_flowers102': 'test', 'coco_captions': 'test', 'imagenet_v2': 'test',
      'imagenet2012_real': 'validation', 'imagenet_r': 'test', 'imagenet_a': 'test', 'imagenet_sketch': 'test'}
  assert tfds_sets.DATASETS['coco_captions'].caption_path == ('captions', 'text')
  # every class dataset has its own prompt set
  assert all(n in tfds_eval_sets.TEMPLATES for n, s in tfds_sets.DATASETS.items() if s.label_key)
  assert tfds_sets.readable_class_names('caltech101', ['faces_easy', 'car_side', 'background_google']) == (
      'centered face', 'car side', 'background')


def test_pets_report_mean_per_class_accuracy(prepared, micro):
  """A class set where the protocol reads mean-per-class accuracy: a model that calls every image an Abyssinian
  gets top-1 4/6 on the imbalanced fake split, but mean-per-class 1/3."""
  data_dir, _ = prepared
  micro.data.tfds_dir = data_dir
  eval_set = evalsets.load_eval_set('oxford_iiit_pet', micro.data, 'test', 16)
  assert eval_set.class_names == ('Abyssinian', 'american bulldog', 'beagle')
  assert eval_set.templates == templates.PETS_TEMPLATES and sorted(eval_set.labels.tolist()) == sorted(PET_LABELS)

  class NamesEncoder:  # a prompt embeds as the one-hot of the class it names
    def texts(self, prompts):
      return np.eye(3)[[next(i for i, n in enumerate(eval_set.class_names) if n in p) for p in prompts]]
  metrics = EVALUATORS.get('zeroshot').fn(NamesEncoder(), eval_set, np.tile([[1.0, 0.0, 0.0]], (6, 1)))
  assert metrics['zeroshot_top1'] == pytest.approx(4 / 6)
  assert metrics['zeroshot_mean_per_class'] == pytest.approx(1 / 3)


def test_cifar10_examples_are_the_written_pixels_and_labels(prepared):
  data_dir, written = prepared
  source = tfds_sets.open_source('cifar10', 'test', data_dir)
  assert len(source) == 7
  examples = [tfds_sets.to_example('cifar10', source[i]) for i in range(7)]
  # tfds shuffles examples when it prepares them: match them back by key
  by_index = {int(e['key'].split('_')[1]): e for e in examples}
  for index, example in by_index.items():
    assert example['image'].dtype == np.uint8 and example['image'].shape == (32, 32, 3)
    np.testing.assert_array_equal(example['image'], written['cifar10']['images'][index])  # PNG is lossless
    assert example['label'] == written['cifar10']['labels'][index] and example['captions'] == []
  assert sorted(by_index) == list(range(7))


def test_cifar10_eval_set(prepared):
  data_dir, _ = prepared
  eval_set = tfds_eval_sets.load_eval_set('cifar10', 'test', data_dir, image_size=24)
  assert isinstance(eval_set, evalsets.EvalSet) and eval_set.name == 'cifar10'
  assert eval_set.images.shape == (7, 24, 24, 3) and eval_set.images.dtype == np.float32
  assert eval_set.class_names == tuple(CIFAR10_NAMES)
  assert sorted(eval_set.labels.tolist()) == list(range(7))
  assert eval_set.captions == [] and eval_set.caption_image.shape == (0,)
  assert eval_set.templates == templates.CIFAR_TEMPLATES
  source = tfds_sets.open_source('cifar10', 'test', data_dir)
  first = tfds_sets.to_example('cifar10', source[0])['image']
  np.testing.assert_allclose(eval_set.images[0], image_ops.normalize_image(image_ops.resize_image(first, 24)))


def test_cifar100_class_names_are_words(prepared):
  data_dir, _ = prepared
  eval_set = tfds_eval_sets.load_eval_set('cifar100', None, data_dir, image_size=32)
  assert eval_set.class_names == ('apple', 'aquarium fish', 'baby', 'maple tree', 'sweet pepper')
  assert eval_set.labels.min() >= 0 and eval_set.labels.max() < len(eval_set.class_names)
  assert eval_set.images.shape == (7, 32, 32, 3)


def test_imagenet_grayscale_jpeg_becomes_rgb_and_names_are_readable(prepared):
  data_dir, written = prepared
  source = tfds_sets.open_source('imagenet2012', 'validation', data_dir)
  examples = {e['key']: e for e in (tfds_sets.to_example('imagenet2012', source[i]) for i in range(len(source)))}
  assert sorted(examples) == [f'ILSVRC2012_val_{i:08d}.JPEG' for i in range(1, 5)]
  for i, (height, width) in enumerate(IMAGENET_SIZES):
    example = examples[f'ILSVRC2012_val_{i + 1:08d}.JPEG']
    assert example['image'].shape == (height, width, 3) and example['image'].dtype == np.uint8
    assert example['label'] == IMAGENET_LABELS[i]
    truth = written['imagenet2012']['images'][i]
    truth = np.repeat(truth[:, :, None], 3, axis=-1) if truth.ndim == 2 else truth
    assert np.abs(example['image'].astype(int) - truth).mean() < 3  # JPEG is lossy
  gray = examples['ILSVRC2012_val_00000003.JPEG']['image']
  assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()
  names = tfds_sets.class_names('imagenet2012', source)
  assert len(names) == 1000
  # CLIP's curated names for n01440764, n01443537, n04008634 ('projectile, missile') and n15075141
  assert (names[0], names[1], names[744], names[999]) == ('tench', 'goldfish', 'missile', 'toilet paper')
  assert names == class_names.IMAGENET_CLASS_NAMES
  eval_set = tfds_eval_sets.load_eval_set('imagenet2012', 'validation', data_dir, image_size=16)
  assert eval_set.images.shape == (4, 16, 16, 3) and sorted(eval_set.labels.tolist()) == sorted(IMAGENET_LABELS)


def test_coco_captions_are_flattened_with_their_image_index(prepared):
  data_dir, _ = prepared
  eval_set = tfds_eval_sets.load_eval_set('coco_captions', 'test', data_dir, image_size=16, max_captions_per_image=None)
  assert eval_set.images.shape == (3, 16, 16, 3) and (eval_set.labels == -1).all() and eval_set.class_names == ()
  assert len(eval_set.captions) == sum(COCO_CAPTION_COUNTS) == len(eval_set.caption_image)
  source = tfds_sets.open_source('coco_captions', 'test', data_dir)
  for row in range(3):
    example = tfds_sets.to_example('coco_captions', source[row])
    image_id = int(example['key']) - 100
    assert example['captions'] == [f'image {image_id} caption {j}' for j in range(COCO_CAPTION_COUNTS[image_id])]
    assert [c for c, i in zip(eval_set.captions, eval_set.caption_image) if i == row] == example['captions']
  # the usual protocol: the first 5 captions of each image
  five = tfds_eval_sets.load_eval_set('coco_captions', 'test', data_dir, image_size=16)
  assert len(five.captions) == 15 and np.bincount(five.caption_image).tolist() == [5, 5, 5]


def test_max_examples_keeps_the_first_examples(prepared):
  data_dir, _ = prepared
  full = tfds_eval_sets.load_eval_set('coco_captions', 'test', data_dir, image_size=16)
  two = tfds_eval_sets.load_eval_set('coco_captions', 'test', data_dir, image_size=16, max_examples=2)
  assert two.images.shape == (2, 16, 16, 3) and set(two.caption_image.tolist()) == {0, 1}
  np.testing.assert_array_equal(two.images, full.images[:2])
  assert two.captions == full.captions[:10]
  with pytest.raises(ValueError, match='max_examples must be positive'):
    tfds_eval_sets.load_eval_set('cifar10', 'test', data_dir, image_size=16, max_examples=0)


@pytest.mark.slow
def test_sets_above_the_memory_limit_are_streamed_with_the_same_results(prepared, micro):
  """Above memory_limit_bytes the images are decoded as they are read, chunk by chunk; every evaluator gives the
  same numbers as on the in-memory images."""
  data_dir, _ = prepared
  limit = 2 * 16 * 16 * 3 * 4  # two 16x16 float32 images
  for name in ('cifar10', 'coco_captions'):
    in_memory = tfds_eval_sets.load_eval_set(name, 'test', data_dir, image_size=16)
    streamed = tfds_eval_sets.load_eval_set(name, 'test', data_dir, image_size=16, memory_limit_bytes=limit)
    assert isinstance(in_memory.images, np.ndarray) and isinstance(streamed.images, StreamedImages)
    assert streamed.images.shape == in_memory.images.shape and len(streamed.images) == len(in_memory.images)
    np.testing.assert_array_equal(streamed.images[1:3], in_memory.images[1:3])
    np.testing.assert_array_equal(streamed.images[[2, 0]], in_memory.images[[2, 0]])
    np.testing.assert_array_equal(streamed.images[-1], in_memory.images[-1])
    assert streamed.captions == in_memory.captions and (streamed.labels == in_memory.labels).all()
  with pytest.raises(TypeError, match='index it in chunks'):
    np.asarray(streamed.images)  # converting it whole would defeat the purpose
  with pytest.raises(IndexError, match='out of range'):
    streamed.images[len(streamed.images)]
  model = models.build_model(micro.model)
  variables = jax.jit(model.init)(jax.random.key(0), np.zeros((1, 16, 16, 3), np.float32),
                                  np.zeros((1, 16), np.int32))
  encoder = Encoder(model, variables, parallel.make_mesh(1), 2, micro.model.text.context_length)  # chunks of 2
  micro.data.tfds_dir = data_dir
  sets = [evalsets.load_eval_set(name, micro.data, 'test', 16) for name in ('cifar10', 'coco_captions')]
  streamed_sets = [dataclasses.replace(s, images=tfds_eval_sets.load_eval_set(
      s.name, 'test', data_dir, image_size=16, memory_limit_bytes=limit).images) for s in sets]
  tasks = ('zeroshot', 'retrieval', 'affinity')
  assert run_evaluations(encoder, streamed_sets, tasks) == run_evaluations(encoder, sets, tasks)


def test_examples_dataset_streams_examples(prepared):
  data_dir, _ = prepared
  dataset = tfds_sets.examples_dataset('coco_captions', 'test', data_dir)
  assert isinstance(dataset, grain.MapDataset) and len(dataset) == 3
  examples = list(dataset)
  assert sorted(e['key'] for e in examples) == ['100', '101', '102']
  assert all(e['image'].shape == (48, 64, 3) and e['label'] == -1 and len(e['captions']) >= 5 for e in examples)


def test_unprepared_dataset_says_how_to_build_it(tmp_path):
  with pytest.raises(errors.DataNotFoundError) as error:
    tfds_sets.open_source('cifar10', 'test', str(tmp_path))
  assert f'tfds build cifar10 --data_dir={tmp_path} --file_format=array_record' in str(error.value)
  with pytest.raises(errors.DataNotFoundError) as error:
    tfds_eval_sets.load_eval_set('imagenet2012', None, str(tmp_path), image_size=16)
  message = str(error.value)
  assert f'tfds build imagenet2012 --data_dir={tmp_path} --file_format=array_record --manual_dir=' in message
  assert 'ILSVRC2012_img_val.tar' in message
  with pytest.raises(errors.DataNotFoundError, match=r'tfds build coco_captions/2014 '):
    tfds_sets.examples_dataset('coco_captions', 'test', str(tmp_path))


def test_split_that_is_not_prepared_says_how_to_build_it(prepared):
  data_dir, _ = prepared
  with pytest.raises(errors.DataNotFoundError, match=r"has the splits \['test'\], not 'train'"):
    tfds_sets.open_source('cifar10', 'train', data_dir)
  with pytest.raises(ValueError, match=r"'validation' is not a split of tfds dataset cifar10; valid choices"):
    tfds_sets.open_source('cifar10', 'validation', data_dir)


def test_tfrecord_dataset_says_how_to_convert_it(tmp_path):
  version_dir = tmp_path / 'cifar10' / '3.0.2'
  version_dir.mkdir(parents=True)
  (version_dir / 'dataset_info.json').write_text(json.dumps({'name': 'cifar10', 'version': '3.0.2',
                                                             'splits': [{'name': 'test'}]}))  # no format: TFRecord
  with pytest.raises(errors.DataNotFoundError) as error:
    tfds_sets.open_source('cifar10', 'test', str(tmp_path))
  message = str(error.value)
  assert "as ['tfrecord'], which only TensorFlow can read" in message
  assert f'tfds convert_format --dataset_version_dir={version_dir} --out_file_format=array_record' in message


def test_unknown_dataset_lists_the_valid_names():
  with pytest.raises(ValueError, match="'mnist' is not supported") as error:
    tfds_sets.open_source('mnist', 'test', '/nonexistent')
  assert all(name in str(error.value) for name in ('cifar10', 'cifar100', 'coco_captions', 'imagenet2012'))


def test_to_example_accepts_tfds_decoded_examples():
  """tfds.testing.mock_data examples (decoded numpy images, numpy labels, str ids) go through to_example too."""
  with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
    source = tfds.data_source('imagenet2012', split='validation')
    examples = [tfds_sets.to_example('imagenet2012', source[i]) for i in range(3)]
  for example in examples:
    assert example['image'].ndim == 3 and example['image'].shape[-1] == 3 and example['image'].dtype == np.uint8
    assert isinstance(example['label'], int) and 0 <= example['label'] < 1000
    assert isinstance(example['key'], str) and example['key'] and example['captions'] == []
  gray = tfds_sets.rgb_image(np.full((4, 5, 1), 7, np.uint8))
  assert gray.shape == (4, 5, 3) and (gray == 7).all()


@pytest.mark.slow
def test_configured_tfds_eval_sets_run_the_tasks_that_apply(prepared, micro):
  """Through the config: data.tfds_dir, eval.datasets and the runner; CIFAR gets zero-shot, COCO retrieval."""
  data_dir, _ = prepared
  micro.data.tfds_dir, micro.data.eval_max_examples = data_dir, 5
  sets = [evalsets.load_eval_set(name, micro.data, 'test', 16) for name in ('cifar10', 'coco_captions')]
  assert [len(s.images) for s in sets] == [5, 3]  # the fake COCO test split has 3 images
  assert sets[0].templates == templates.CIFAR_TEMPLATES and sets[1].templates == ()
  cifar = evalsets.load_eval_set('cifar10', micro.data, 'test', 16)
  assert with_templates(cifar, 'simple').templates == ('a photo of a {}.',)
  model = models.build_model(micro.model)
  variables = model.init(jax.random.key(0), np.zeros((1, 16, 16, 3), np.float32), np.zeros((1, 16), np.int32))
  encoder = Encoder(model, variables, parallel.make_mesh(1), 8, micro.model.text.context_length)
  metrics = run_evaluations(encoder, sets, ('zeroshot', 'retrieval', 'affinity'))
  assert 0 <= metrics['eval/cifar10/zeroshot_top1'] <= 1 and 'eval/cifar10/i2t_r1' not in metrics
  assert 0 <= metrics['eval/coco_captions/t2i_r5'] <= 1 and 'eval/coco_captions/zeroshot_top1' not in metrics


def test_linear_probe_fits_on_the_train_split(prepared, micro):
  """With linear_probe among the tasks, a class set brings the first data.probe_train_examples of its train split
  (all with 0); the probe then fits on those and scores on the eval split."""
  data_dir, written = prepared
  micro.data.tfds_dir = data_dir
  micro.eval.datasets, micro.eval.tasks = ('cifar100',), ('zeroshot', 'linear_probe')
  (eval_set,) = evalsets.load_eval_sets(micro)
  assert eval_set.train_images.shape == (12, 16, 16, 3) and EVALUATORS.get('linear_probe').applies(eval_set)
  assert sorted(eval_set.train_labels.tolist()) == sorted(written['cifar100']['train_labels'])  # tfds shuffled them

  class PixelFeatures:  # an encoder whose features are the image's pixels, subsampled
    image_features = staticmethod(lambda x: np.asarray(x[:, ::4, ::4]).reshape(len(x), -1))
  metrics = linear_probe.linear_probe_evaluator(PixelFeatures(), eval_set, None,
                                                method='ridge')
  assert 0 <= metrics['linear_probe_top1'] <= 1
  micro.data.probe_train_examples = 5
  assert evalsets.load_eval_sets(micro)[0].train_images.shape == (5, 16, 16, 3)
  micro.eval.tasks = ('zeroshot',)
  assert evalsets.load_eval_sets(micro)[0].train_images is None  # not loaded when no probe runs
  micro.eval.datasets, micro.eval.tasks = ('cifar10',), ('linear_probe',)
  with pytest.raises(errors.DataNotFoundError, match='linear probe on cifar10 trains on its train split') as error:
    evalsets.load_eval_sets(micro)
  assert "has the splits ['test'], not 'train'" in str(error.value)


def test_a_tfds_split_trains_as_a_source_beside_the_embedded_dataset(prepared, micro, tmp_path):
  """config.data.path lists sources; 'tfds:cifar10:test' is written once as shards of our schema."""
  data_dir, written = prepared
  micro.data.update(name='array_record', path='synthetic, tfds:cifar10:test', tfds_dir=data_dir,
                    cache_dir=str(tmp_path))
  paths = train_paths(micro.data)
  assert paths == train_paths(micro.data)  # written once, then reused
  sources = mixing.shard_sources(paths)
  assert mixing.source_names(sources) == ('studio', 'web', 'sketch', 'cifar10')
  cifar = pipeline.read_all([p for p, s in zip(paths, sources) if s == 'cifar10'])
  assert len(cifar) == 7 and all(e['source'] == 'cifar10' for e in cifar)
  names = {e['label']: e['caption'] for e in cifar}
  assert all(caption == f'a photo of a {CIFAR10_NAMES[label]}.' for label, caption in names.items())
  iterator = pipeline.train_iterator(paths, views.ClipViews(16, 16), pipeline.PipelineSettings(seed=0,
                                     global_batch_size=8, process_index=0, process_count=1, mixing='weighted',
                                     source_weights='studio=1,web=1,sketch=1,cifar10=3'), sources=sources)
  _, status = pipeline.pop_status(next(iterator))
  assert 3 in status['record_source']  # cifar10 examples come through the same pipeline
  micro.data.path = 'synthetic,/nowhere'
  with pytest.raises(errors.DataNotFoundError, match="entry '/nowhere' holds no ArrayRecord shards"):
    train_paths(micro.data)
