"""ImageNet's distribution shifts as tfds eval sets (imagenet_v2, imagenet2012_real, imagenet_r, imagenet_a,
imagenet_sketch), read without TensorFlow from tiny datasets prepared with the real names, versions, configs and
features of the tfds builders (tensorflow_datasets/datasets/<name>/<name>_dataset_builder.py), as test_tfds.py does.
"""
import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from test_tfds import _builder, _encode  # the fake-builder machinery of the existing tfds tests
from vlp_jax import errors
from vlp_jax import evalsets
from vlp_jax import models, parallel
from vlp_jax.data.sources import class_names
from vlp_jax.data.sources import tfds_splits as tfds_sets
from vlp_jax.evalsets import prompts
from vlp_jax.evalsets import tfds as tfds_eval_sets
from vlp_jax.evaluation import EVALUATORS, Encoder, run_evaluations, zeroshot

LABELS_FILE = tfds.core.tfds_path('datasets/imagenet2012/labels.txt')  # imagenet_common.label_names_file()
WNIDS = tfds.core.tfds_path('datasets/imagenet2012/labels.txt').read_text().split()
V2_LABELS = (0, 500, 999)
SKETCH_LABELS = (3, 3, 744)
R_POSITIONS = (0, 57, 199, 57)  # positions among the 200 ImageNet-R classes
A_POSITIONS = (199, 0, 100)
REAL = ((0, [0]), (1, [1, 2]), (2, []), (5, [7]), (9, [9, 10, 11]))  # (original label, real labels)


def _image(rng, height=24, width=32):
  return _encode(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), 'JPEG')


def _features(label_key='label', image=None, **extra):
  return tfds.features.FeaturesDict({'image': image or tfds.features.Image(encoding_format='jpeg'),
                                     label_key: tfds.features.ClassLabel(names_file=LABELS_FILE),
                                     'file_name': tfds.features.Text(), **extra})


def _builders(rng):
  """{name: builder class}, with the splits, versions and configs of tfds 4.9; the R, A and Sketch builders give
  their labels as WordNet ids (folder names), as the real ones do."""
  v2 = [{'image': _image(rng), 'label': label, 'file_name': f'{label}/{i}.jpeg'} for i, label in enumerate(V2_LABELS)]
  sketch = [{'image': _image(rng), 'label': WNIDS[label], 'file_name': f'{WNIDS[label]}/sketch_{i}.JPEG'}
            for i, label in enumerate(SKETCH_LABELS)]
  r = [{'image': _image(rng), 'label': class_names.IMAGENET_R_WNIDS[p],
        'file_name': f'{class_names.IMAGENET_R_WNIDS[p]}/art_{i}.jpg'} for i, p in enumerate(R_POSITIONS)]
  a = [{'image': _image(rng), 'label': class_names.IMAGENET_A_WNIDS[p],
        'file_name': f'{i}_{class_names.IMAGENET_A_WNIDS[p]}.jpg'} for i, p in enumerate(A_POSITIONS)]
  real = [{'image': _image(rng), 'original_label': original, 'real_label': labels,
           'file_name': f'ILSVRC2012_val_{i + 1:08d}.JPEG'} for i, (original, labels) in enumerate(REAL)]
  real_features = _features('original_label', real_label=tfds.features.Sequence(
      tfds.features.ClassLabel(names_file=LABELS_FILE)))
  return {'imagenet_v2': _builder('imagenet_v2', '3.0.0', 'matched-frequency', _features(), {'test': v2}),
          'imagenet_sketch': _builder('imagenet_sketch', '1.0.0', '', _features(image=tfds.features.Image()),
                                      {'test': sketch}),
          'imagenet_r': _builder('imagenet_r', '0.2.0', '', _features(), {'test': r}),
          'imagenet_a': _builder('imagenet_a', '0.1.0', '', _features(), {'test': a}),
          'imagenet2012_real': _builder('imagenet2012_real', '1.0.0', '', real_features, {'validation': real})}


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  tfds.disable_progress_bar()
  directory = str(tmp_path_factory.mktemp('tfds_imagenet_variants'))
  for builder_cls in _builders(np.random.default_rng(0)).values():
    builder = builder_cls(data_dir=directory, file_format='array_record')
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  return directory


def _by_key(eval_set, name, data_dir):
  """{example key: row of the eval set}: tfds shuffles examples when it prepares them."""
  source = tfds_sets.open_source(name, None, data_dir)
  return {tfds_sets.example_fields(name, source[i])['key']: i for i in range(len(source))}


def test_subset_wnids_are_200_imagenet_classes_in_the_standard_order():
  for wnids in (class_names.IMAGENET_R_WNIDS, class_names.IMAGENET_A_WNIDS):
    assert len(wnids) == len(set(wnids)) == 200 and list(wnids) == sorted(wnids) and set(wnids) <= set(WNIDS)
  assert class_names.IMAGENET_R_WNIDS != class_names.IMAGENET_A_WNIDS
  # ImageNet-1k indices as the datasets' evaluation code (and timm's imagenet_[ar]_indices.txt) list them
  assert list(tfds_sets.subset_positions('imagenet_a'))[:3] == [6, 11, 13]
  assert list(tfds_sets.subset_positions('imagenet_r'))[:3] == [1, 2, 4]
  assert tfds_sets.subset_positions('imagenet_r')[1] == 0 and tfds_sets.subset_positions('imagenet_v2') == {}


@pytest.mark.parametrize('name,count,split', [('imagenet_v2', 1000, 'test'), ('imagenet_sketch', 1000, 'test'),
                                              ('imagenet_r', 200, 'test'), ('imagenet_a', 200, 'test'),
                                              ('imagenet2012_real', 1000, 'validation')])
def test_sets_load_through_the_registry_with_imagenet_names_and_prompts(data_dir, micro, name, count, split):
  micro.data.tfds_dir = data_dir
  eval_set = evalsets.load_eval_set(name, micro.data, 'test', 16, linear_probe=True)
  assert tfds_sets.dataset_spec(name).eval_split == split
  assert eval_set.name == name and eval_set.images.shape[1:] == (16, 16, 3)
  assert len(eval_set.class_names) == count and eval_set.templates == prompts.OPENAI_IMAGENET_TEMPLATES
  assert eval_set.train_images is None  # test sets only: no linear probe
  assert (eval_set.label_sets is not None) == (name == 'imagenet2012_real')
  if count == 1000:
    assert eval_set.class_names == class_names.IMAGENET_CLASS_NAMES
  else:
    subset = class_names.IMAGENET_R_WNIDS if name == 'imagenet_r' else class_names.IMAGENET_A_WNIDS
    curated = dict(zip(WNIDS, class_names.IMAGENET_CLASS_NAMES))
    assert eval_set.class_names == tuple(curated[w] for w in subset)


def test_v2_and_sketch_labels_are_imagenet_indices(data_dir):
  for name, truth in (('imagenet_v2', V2_LABELS), ('imagenet_sketch', SKETCH_LABELS)):
    eval_set = tfds_eval_sets.load_eval_set(name, None, data_dir, image_size=16)
    keys = _by_key(eval_set, name, data_dir)
    for key, row in keys.items():
      index = int(key.split('/')[0]) if name == 'imagenet_v2' else WNIDS.index(key.split('/')[0])
      assert eval_set.labels[row] == index
    assert sorted(eval_set.labels.tolist()) == sorted(truth)
  assert eval_set.class_names[744] == 'missile'


def test_r_and_a_labels_are_positions_among_their_200_classes(data_dir):
  for name, positions in (('imagenet_r', R_POSITIONS), ('imagenet_a', A_POSITIONS)):
    subset = tfds_sets.dataset_spec(name).label_subset
    eval_set = tfds_eval_sets.load_eval_set(name, None, data_dir, image_size=16)
    for key, row in _by_key(eval_set, name, data_dir).items():
      wnid = key.split('/')[0] if name == 'imagenet_r' else key.split('_')[1].split('.')[0]
      assert eval_set.labels[row] == subset.index(wnid) < 200
    assert sorted(eval_set.labels.tolist()) == sorted(positions)
  # a class-caption training record names the class of its position
  source = tfds_sets.open_source('imagenet_r', 'test', data_dir)
  names = tfds_sets.class_names('imagenet_r', source)
  record = tfds_sets.training_record('imagenet_r', source[0], names)
  assert record['caption'] == f"a photo of a {names[record['label']]}." and 0 <= record['label'] < 200
  with pytest.raises(ValueError, match='is not one of its 200 classes'):  # an ImageNet class outside the subset
    tfds_sets.example_fields('imagenet_r', {'label': 0, 'file_name': b'x'})


def test_real_label_sets_are_loaded_with_the_original_labels(data_dir):
  eval_set = tfds_eval_sets.load_eval_set('imagenet2012_real', None, data_dir, image_size=16)
  assert eval_set.label_sets.shape == (5, 3)
  for key, row in _by_key(eval_set, 'imagenet2012_real', data_dir).items():
    original, real = REAL[int(key[15:23]) - 1]
    assert eval_set.labels[row] == original
    assert eval_set.label_sets[row].tolist() == real + [-1] * (3 - len(real))


def _reference_real(logits, label_sets, labels):
  """One image at a time: the ReaL protocol."""
  hits1, hits5, per_class = [], [], {}
  for row, labels_ in enumerate(label_sets):
    real = {int(x) for x in labels_ if x >= 0}
    if not real:
      continue
    order = sorted(range(logits.shape[1]), key=lambda c: -logits[row, c])
    hits1.append(order[0] in real)
    hits5.append(bool(real & set(order[:5])))
    per_class.setdefault(int(labels[row]), []).append(order[0] in real)
  return {'zeroshot_top1': np.mean(hits1), 'zeroshot_top5': np.mean(hits5),
          'zeroshot_mean_per_class': np.mean([np.mean(v) for v in per_class.values()]),
          'zeroshot_chance': 1 / logits.shape[1]}


def test_real_scoring_counts_any_real_label_and_skips_images_without_one():
  rng = np.random.default_rng(1)
  num, num_classes, dim = 60, 12, 12
  image_emb = rng.normal(size=(num, dim))
  classes = np.eye(num_classes)
  logits = image_emb @ classes.T
  labels = rng.integers(0, num_classes, num)
  label_sets = np.full((num, 3), -1)
  for row in range(num):
    count = row % 4  # 0 to 3 labels; rows with none are left out
    label_sets[row, :count] = rng.choice(num_classes, count, replace=False)
  label_sets[1, :2] = [np.argsort(-logits[1])[1], np.argmax(logits[1])]  # the top-1 as the second real label
  metrics = zeroshot.label_set_metrics(image_emb, classes, label_sets, labels)
  reference = _reference_real(logits, label_sets, labels)
  assert metrics.keys() == reference.keys()
  for key, value in reference.items():
    assert metrics[key] == pytest.approx(value), key
  # by hand: image 0 has no real label, 1 is hit by its second label, 2 is missed, 3 more images with none
  tiny = np.array([[-1, -1], [2, 0], [1, -1], [-1, -1]])
  emb = np.eye(3)[[0, 0, 0, 1]]
  hand = zeroshot.label_set_metrics(emb, np.eye(3), tiny, np.array([0, 0, 1, 1]))
  assert hand['zeroshot_top1'] == pytest.approx(1 / 2) and hand['zeroshot_top5'] == 1.0
  assert hand['zeroshot_mean_per_class'] == pytest.approx((1 + 0) / 2)
  # scored against the single original labels instead: 3 of the 4 images
  assert zeroshot.zeroshot_metrics(emb, np.eye(3), np.array([0, 0, 1, 1]))['zeroshot_top1'] == pytest.approx(3 / 4)
  with pytest.raises(ValueError, match='no image has a label'):
    zeroshot.label_set_metrics(emb, np.eye(3), np.full((4, 1), -1), np.zeros(4, int))


def test_real_zeroshot_evaluator_scores_against_the_label_sets(data_dir, micro):
  """Through the zero-shot evaluator: an encoder whose top-1 is the image's original label; ReaL counts the image
  whose real labels leave the original one out (original 5, real [7]) a miss, skips the one without any."""
  micro.data.tfds_dir = data_dir
  eval_set = evalsets.load_eval_set('imagenet2012_real', micro.data, 'test', 16)

  class OneHotNames:  # every prompt of class c embeds as the one-hot of c (prompts come class by class)
    def texts(self, prompts_):
      return np.eye(1000)[np.arange(len(prompts_)) // len(eval_set.templates)]
  image_emb = np.eye(1000)[eval_set.labels]
  metrics = EVALUATORS.get('zeroshot').fn(OneHotNames(), eval_set, image_emb)
  assert metrics['zeroshot_top1'] == pytest.approx(3 / 4)  # 4 images with real labels; original 5 is not in [7]
  assert metrics['zeroshot_chance'] == pytest.approx(1 / 1000)


@pytest.mark.slow
def test_zeroshot_runs_end_to_end_on_imagenet_r_with_a_tiny_model(data_dir, micro):
  micro.data.tfds_dir = data_dir
  micro.eval.datasets = ('imagenet_r',)
  (eval_set,) = evalsets.load_eval_sets(micro)
  size = micro.model.vision.image_size
  model = models.build_model(micro.model)
  variables = model.init(jax.random.key(0), np.zeros((1, size, size, 3), np.float32),
                         np.zeros((1, micro.model.text.context_length), np.int32))
  encoder = Encoder(model, variables, parallel.make_mesh(1), 64, micro.model.text.context_length)
  metrics = run_evaluations(encoder, [eval_set], ('zeroshot', 'retrieval'), templates='simple')
  assert 0 <= metrics['eval/imagenet_r/zeroshot_top1'] <= 1
  assert metrics['eval/imagenet_r/zeroshot_chance'] == pytest.approx(1 / 200)
  assert 'eval/imagenet_r/i2t_r1' not in metrics


def test_unprepared_sets_say_how_to_prepare_them(tmp_path):
  with pytest.raises(errors.DataNotFoundError) as error:
    tfds_eval_sets.load_eval_set('imagenet_v2', None, str(tmp_path), image_size=16)
  assert f'tfds build imagenet_v2/matched-frequency --data_dir={tmp_path} --file_format=array_record' in str(
      error.value)
  with pytest.raises(errors.DataNotFoundError) as error:
    tfds_eval_sets.load_eval_set('imagenet2012_real', None, str(tmp_path), image_size=16)
  assert 'tfds build imagenet2012_real' in str(error.value) and 'ILSVRC2012_img_val.tar' in str(error.value)
  assert '--manual_dir=MANUAL_DIR' in str(error.value)
  for name in ('imagenet_r', 'imagenet_a', 'imagenet_sketch'):
    with pytest.raises(errors.DataNotFoundError, match=f'tfds build {name} --data_dir='):
      tfds_eval_sets.load_eval_set(name, None, str(tmp_path), image_size=16)
