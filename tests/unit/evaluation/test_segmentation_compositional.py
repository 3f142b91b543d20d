"""Zero-shot segmentation (mIoU, patch embeddings) and compositionality (SugarCrepe, Winoground, hard negatives)."""
import json
import types

import jax
import numpy as np
import pytest
from PIL import Image

from vlp_jax import models, parallel
from vlp_jax.data.image import image_ops
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.evalsets.compositional import sugarcrepe_eval_set
from vlp_jax.evaluation import compositional as comp
from vlp_jax.evaluation import segmentation as seg
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.objectives.base import tower_variables


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def naive_miou(pred, target, num_classes, ignore_index=None):
  """Per-class IoU by pixel masks over the whole set, mean over the classes seen in either map."""
  valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
  ious = []
  for c in range(num_classes):
    union = np.sum(((pred == c) | (target == c)) & valid)
    if union:
      ious.append(np.sum((pred == c) & (target == c) & valid) / union)
  return np.mean(ious)


# ---------------------------------------------------------------------------------------------------------- mIoU


def test_miou_matches_naive_reference():
  rng = np.random.default_rng(0)
  target = rng.integers(0, 5, size=(6, 9, 7))
  pred = np.where(rng.random(target.shape) < 0.6, target, rng.integers(0, 5, size=target.shape))
  # class 5 absent: not averaged
  assert seg.mean_iou(seg.per_class_iou(pred, target, 6)) == pytest.approx(naive_miou(pred, target, 6))
  assert np.isnan(seg.per_class_iou(pred, target, 6)[5])
  assert seg.mean_iou(seg.per_class_iou(target, target, 6)) == 1.0


def test_miou_hand_computed_2x2():
  target = np.array([[[0, 1], [1, 1]]])
  pred = np.array([[[0, 0], [1, 1]]])
  # class 0: intersection 1, union 2; class 1: intersection 2, union 3
  np.testing.assert_allclose(seg.per_class_iou(pred, target, 2), [1 / 2, 2 / 3])
  assert seg.mean_iou(seg.per_class_iou(pred, target, 2)) == pytest.approx(7 / 12)
  assert seg.mean_iou(seg.per_class_iou(1 - target, target, 2)) == 0.0


def test_miou_ignore_index():
  rng = np.random.default_rng(1)
  target = rng.integers(0, 3, size=(4, 6, 6))
  target[:, :2] = 255
  pred = rng.integers(0, 3, size=target.shape)
  pred[:, :2] = 3  # a class predicted only on ignored pixels does not count
  got = seg.mean_iou(seg.per_class_iou(pred, target, 4, ignore_index=255))
  assert got == pytest.approx(naive_miou(pred[:, 2:], target[:, 2:], 4))
  assert got == pytest.approx(naive_miou(pred, target, 4, ignore_index=255))
  assert np.isnan(seg.per_class_iou(pred, target, 4, ignore_index=255)[3])
  with pytest.raises(ValueError, match='outside'):
    seg.mean_iou(seg.per_class_iou(pred, target, 4))  # 255 is not a label without ignore_index


def test_upsampling_matches_jax_resize():
  logits = np.random.default_rng(2).normal(size=(2, 3, 4, 5)).astype(np.float32)
  got = seg.upsample_logits(logits, (12, 10))
  want = jax.image.resize(logits, (2, 12, 10, 5), 'bilinear')
  np.testing.assert_allclose(got, want, atol=1e-5)
  nearest = seg.upsample_logits(logits, (6, 8), 'nearest')
  np.testing.assert_array_equal(nearest, logits.repeat(2, axis=1).repeat(2, axis=2))


def test_patch_grid():
  assert seg.patch_grid((16, 16), 16) == (4, 4)
  assert seg.patch_grid((224, 160), 14 * 10) == (14, 10)
  with pytest.raises(ValueError):
    seg.patch_grid((16, 16), 15)


# ---------------------------------------------------------------------------------------- segmentation with fakes

NUM_CLASSES, DIM, PATCH, GRID = 5, 16, 4, 4


def _oracle_setup(seed=3, num_images=10):
  """Class, background embeddings; images carrying their index; per-patch labels and the masks they tile."""
  rng = np.random.default_rng(seed)
  class_emb = _unit(rng.normal(size=(NUM_CLASSES, DIM)))
  background = _unit(rng.normal(size=(1, DIM)))
  grid_labels = rng.integers(0, NUM_CLASSES + 1, size=(num_images, GRID, GRID))  # 0 = background
  masks = grid_labels.repeat(PATCH, axis=1).repeat(PATCH, axis=2).astype(np.uint8)
  images = np.zeros((num_images, GRID * PATCH, GRID * PATCH, 3), np.float32)
  images[:, 0, 0, 0] = np.arange(num_images)
  return class_emb, background, grid_labels, masks, images


def test_oracle_patch_embeddings_give_perfect_miou():
  class_emb, background, grid_labels, masks, images = _oracle_setup()
  label_emb = np.concatenate([background, class_emb])  # row l = the embedding of label l

  def encode_patches(batch):
    return label_emb[grid_labels[batch[:, 0, 0, 0].astype(int)]]

  nearest = seg.segmentation_confusion(encode_patches, images, masks, class_emb, background, 'nearest', chunk=3)
  assert seg.segmentation_metrics(nearest)['segmentation_miou'] == 1.0
  assert nearest.sum() == masks.size
  # Bilinear logits round the corners of isolated patches, but stay close.
  bilinear = seg.segmentation_confusion(encode_patches, images, masks, class_emb, background, chunk=4)
  assert 0.75 < seg.segmentation_metrics(bilinear)['segmentation_miou'] < 1.0

  def encode_random(batch):
    return _unit(np.random.default_rng(7).normal(size=(len(batch), GRID, GRID, DIM)))
  random = seg.segmentation_metrics(seg.segmentation_confusion(encode_random, images, masks, class_emb, background))
  assert random['segmentation_miou'] < 0.3


def test_chance_levels_are_those_of_a_uniformly_random_labelling():
  rng = np.random.default_rng(0)
  shares = np.array([0.6, 0.25, 0.1, 0.05])  # background, then three classes
  target = rng.choice(len(shares), size=(40, 32, 32), p=shares)
  metrics = seg.segmentation_metrics(seg.confusion_matrix(target, target, len(shares)))
  assert metrics['segmentation_miou'] == 1.0  # the scores themselves are unchanged
  # The closed form of the docstring on the true label shares...
  p = np.bincount(target.ravel(), minlength=len(shares)) / target.size
  iou = p / (len(p) * p + 1 - p)
  assert metrics['segmentation_miou_chance'] == pytest.approx(iou.mean())
  assert metrics['segmentation_miou_fg_chance'] == pytest.approx(iou[1:].mean())
  assert metrics['segmentation_pixel_acc_chance'] == pytest.approx(1 / len(p))
  # ...and what a random labelling scores.
  random = seg.segmentation_scores(seg.confusion_matrix(rng.integers(0, len(p), target.shape), target, len(p)))
  for name, value in random.items():
    assert value == pytest.approx(metrics[f'{name}_chance'], abs=0.01), name


def test_background_threshold():
  class_emb = np.eye(DIM)[:NUM_CLASSES]
  grid_labels = np.array([[[0, 1], [3, 0]]])
  patch_emb = np.eye(DIM)[np.where(grid_labels == 0, DIM - 1, grid_labels - 1)]  # background: orthogonal to all
  logits = seg.segmentation_logits(patch_emb, class_emb, 0.5)
  np.testing.assert_array_equal(np.argmax(logits, axis=-1), grid_labels)
  assert seg.predict_masks(logits, (4, 4), 'nearest').shape == (1, 4, 4)


def test_evaluator_skips_without_masks_or_patches():
  eval_set = types.SimpleNamespace(masks=None, class_names=('a',), templates=('{}',), images=np.zeros((1, 4, 4, 3)))
  assert seg.segmentation_evaluator(types.SimpleNamespace(has_patch_embeddings=True), eval_set, None) == {}
  eval_set.masks = np.zeros((1, 4, 4), np.uint8)
  assert seg.segmentation_evaluator(types.SimpleNamespace(), eval_set, None) == {}  # e.g. a ResNet tower


# ------------------------------------------------------------------------------------------------ compositionality


def test_one_negative_each_is_sugarcrepe_accuracy():
  """With one negative per image, `all` and `pair` are both SugarCrepe's accuracy: sim(image, pos) > sim(image, neg)."""
  def accuracy(image, pos, neg):
    all_acc, pair_acc = comp.hard_negative_accuracy(image, pos, neg, np.arange(len(image)))
    assert all_acc == pair_acc
    return all_acc
  rng = np.random.default_rng(4)
  images = _unit(rng.normal(size=(8, 6)))
  others = _unit(rng.normal(size=(8, 6)))
  assert accuracy(images, images, others) == 1.0
  assert accuracy(images, others, images) == 0.0
  assert accuracy(images, images, images) == 0.0  # ties fail
  image = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
  pos = np.array([[0.8, 0.6], [1.0, 0.0], [0.0, 1.0]])
  neg = np.array([[0.6, 0.8], [0.6, 0.8], [1.0, 0.0]])
  assert accuracy(image, pos, neg) == pytest.approx(2 / 3)  # 0.8 > 0.6, 0 < 0.8, 0.8 > 0.6


def test_winoground_scores():
  perfect = np.array([[[1.0, 0.0], [0.0, 1.0]]])
  assert comp.winoground_scores(perfect) == {'text': 1.0, 'image': 1.0, 'group': 1.0}
  # Both images prefer their own caption (text passes), but caption 1 scores image 0 higher than image 1.
  text_only = np.array([[[0.9, 0.8], [0.1, 0.2]]])
  assert comp.winoground_scores(text_only) == {'text': 1.0, 'image': 0.0, 'group': 0.0}
  # Both captions prefer their own image, but image 0 prefers caption 1.
  image_only = np.array([[[0.5, 0.6], [0.1, 0.7]]])
  assert comp.winoground_scores(image_only) == {'text': 0.0, 'image': 1.0, 'group': 0.0}
  scores = comp.winoground_scores(np.concatenate([perfect, text_only, image_only, 1 - perfect]))
  assert scores == {'text': 0.5, 'image': 0.5, 'group': 0.25}
  emb = np.eye(2)[None]
  np.testing.assert_array_equal(comp.winoground_similarity(emb, emb[:, ::-1]), [[[0.0, 1.0], [1.0, 0.0]]])


def test_hard_negative_accuracy_all_and_pairs():
  image = np.eye(3)
  pos = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.6, 0.8]])  # scores 1, 1 and 0.8
  neg = np.eye(3)[[1, 2, 1, 0, 2]]
  neg_image = np.array([0, 0, 1, 1, 2])
  # image 0 beats both; image 1 ties one (a tie fails) and beats one; image 2 loses (1.0 > 0.8).
  np.testing.assert_array_equal(comp.beats_negatives(image, pos, neg, neg_image), [True, True, False, True, False])
  all_acc, pair_acc = comp.hard_negative_accuracy(image, pos, neg, neg_image)
  assert all_acc == pytest.approx(1 / 3)
  assert pair_acc == pytest.approx(3 / 5)


def test_compositional_evaluator_with_fake_encoder():
  vocab = {'a red circle': 0, 'a blue circle': 1, 'a red square': 2, 'a green star': 3}

  class FakeEncoder:
    def texts(self, captions):
      return np.eye(len(vocab))[[vocab[c] for c in captions]]
  image_emb = np.eye(len(vocab))[[0, 3]]
  eval_set = types.SimpleNamespace(canonical_captions=['a red circle', 'a green star'],
                                   hard_negatives=[['a blue circle', 'a red square'], ['a red circle']])
  got = comp.compositional_evaluator(FakeEncoder(), eval_set, image_emb)
  assert got == {'compositional_acc': 1.0, 'compositional_pair_acc': 1.0,
                 'compositional_chance': pytest.approx((1 / 3 + 1 / 2) / 2)}
  eval_set.hard_negatives = [['a red circle'], ['a red square']]  # image 0: a tie with its own caption
  assert comp.compositional_evaluator(FakeEncoder(), eval_set, image_emb)['compositional_acc'] == 0.5
  assert comp.compositional_evaluator(FakeEncoder(), types.SimpleNamespace(), image_emb) == {}


def test_per_category_and_winoground_evaluators_against_naive_loops():
  """SugarCrepe categories and Winoground groups, scored with a python loop over the papers' definitions."""
  rng = np.random.default_rng(7)
  n, d = 60, 6
  texts = {f'c{i}': _unit(rng.normal(size=d)) for i in range(3 * n)}

  class TableEncoder:
    def texts(self, captions):
      return np.stack([texts[c] for c in captions])
  image_emb = _unit(rng.normal(size=(n, d)))
  positives, negatives = [f'c{i}' for i in range(n)], [[f'c{n + i}'] for i in range(n)]
  categories = [('add_att', 'swap_obj', 'replace_rel')[i % 3] for i in range(n)]
  eval_set = types.SimpleNamespace(canonical_captions=positives, hard_negatives=negatives, categories=categories)
  got = comp.compositional_evaluator(TableEncoder(), eval_set, image_emb)
  for category in ('add_att', 'swap_obj', 'replace_rel'):
    wins = [image_emb[i] @ texts[positives[i]] > image_emb[i] @ texts[negatives[i][0]]
            for i in range(n) if categories[i] == category]
    assert got[f'compositional_acc_{category}'] == pytest.approx(np.mean(wins))
  # one negative each: the pooled accuracy is the entry-weighted mean of the categories'
  assert got['compositional_acc'] == pytest.approx(np.mean([got[f'compositional_acc_{c}'] for c in set(categories)]))

  captions = [f'c{i}' for i in range(n)]  # 30 groups of two images and two captions
  got = comp.compositional_evaluator(TableEncoder(), types.SimpleNamespace(winoground_captions=captions), image_emb)
  text = image = group = 0
  for g in range(n // 2):
    s = [[image_emb[2 * g + i] @ texts[captions[2 * g + c]] for c in (0, 1)] for i in (0, 1)]
    t_ok = s[0][0] > s[0][1] and s[1][1] > s[1][0]
    i_ok = s[0][0] > s[1][0] and s[1][1] > s[0][1]
    text, image, group = text + t_ok, image + i_ok, group + (t_ok and i_ok)
  assert (got['winoground_text'], got['winoground_image'], got['winoground_group']) == pytest.approx(
      (text / 30, image / 30, group / 30))
  assert got['winoground_group_chance'] == pytest.approx(1 / 6)
  with pytest.raises(ValueError, match='two images and two captions per group'):
    comp.compositional_evaluator(TableEncoder(), types.SimpleNamespace(winoground_captions=captions[:5]),
                                 image_emb[:5])


def test_load_sugarcrepe(tmp_path):
  colours = {'a.png': (255, 0, 0), 'b.png': (0, 0, 255)}
  for name, colour in colours.items():
    Image.fromarray(np.full((8, 12, 3), colour, np.uint8)).save(tmp_path / name)
  data = {'0': {'filename': 'a.png', 'caption': 'a red box', 'negative_caption': 'a blue box'},
          '1': {'filename': 'b.png', 'caption': 'a blue box', 'negative_caption': 'a red box'},
          '2': {'filename': 'a.png', 'caption': 'red', 'negative_caption': 'blue'}}
  (tmp_path / 'add_att.json').write_text(json.dumps(data))
  eval_set = sugarcrepe_eval_set(str(tmp_path), str(tmp_path), 4)
  images = eval_set.images[:]
  assert images.shape == (3, 4, 4, 3) and images.dtype == np.float32
  assert eval_set.canonical_captions == ['a red box', 'a blue box', 'red']
  assert eval_set.hard_negatives == [['a blue box'], ['a red box'], ['blue']]
  assert eval_set.categories == ['add_att'] * 3
  np.testing.assert_allclose(images[0], image_ops.normalize_image(np.full((4, 4, 3), colours['a.png'], np.uint8)),
                             atol=1e-6)
  np.testing.assert_array_equal(images[0], images[2])
  assert not np.allclose(images[0], images[1])

  centre = (images[0] + images[1]).mean(axis=(0, 1)) / 2

  class ColourEncoder:  # an image embeds as its mean colour, a caption as the colour it names first
    def images(self, x):
      return _unit(x.mean(axis=(1, 2)) - centre)

    def texts(self, captions):
      return self.images(np.stack([images[0] if 'red' in c.split()[:2] else images[1] for c in captions]))
  encoder = ColourEncoder()
  got = comp.compositional_evaluator(encoder, eval_set, encoder.images(images))
  assert got['compositional_acc'] == got['compositional_acc_add_att'] == 1.0
  (tmp_path / 'bad.json').write_text(json.dumps({'0': {'file': 'a.png'}}))
  with pytest.raises(ValueError, match='bad.json is not in the SugarCrepe format'):
    sugarcrepe_eval_set(str(tmp_path), str(tmp_path), 4)


# ----------------------------------------------------------------------------------- through a micro ViT model


@pytest.mark.slow
def test_evaluators_through_micro_model(micro):
  model = models.build_model(micro.model)
  params, model_state = jax.jit(lambda rng: models.init_variables(model, rng))(jax.random.key(0))  # eager: 3x slower
  variables = tower_variables(params, model_state)
  mesh = parallel.make_mesh()
  encoder = Encoder(model, variables, mesh, batch_size=16, context_length=micro.model.text.context_length)
  size = micro.model.vision.image_size
  examples = [synthetic.make_example(0, 'test', 'studio', i, size) for i in range(12)]
  images = np.stack([image_ops.normalize_image(records.decode_image(e['image'])) for e in examples])
  eval_set = types.SimpleNamespace(
      images=images, class_names=synthetic.CLASS_NAMES, templates=('a photo of the {}.', 'the {}.'),
      masks=np.stack([records.decode_mask(e['mask']) for e in examples]),
      canonical_captions=[e['canonical_caption'] for e in examples],
      hard_negatives=[list(e['hard_negatives']) for e in examples])

  # The patch recipe is the class token's: ln_post (already in `tokens`), then proj.
  out = jax.jit(lambda v, x: model.apply(v, x, method=model.encode_image))(variables, images)
  proj = np.asarray(params['visual']['proj'])
  np.testing.assert_allclose(_unit(np.asarray(out['cls']) @ proj), encoder.images(images), atol=1e-5)
  # The linear probe's features are the class token before the projection (CLIP's and SLIP's protocols).
  features = encoder.image_features(images)
  assert features.shape == (12, micro.model.vision.width)
  np.testing.assert_allclose(features, np.asarray(out['cls']), atol=1e-5)
  patches = encoder.patch_embeddings(images)
  assert patches.shape == (12, (size // micro.model.vision.patch_size) ** 2, micro.model.embed_dim)
  np.testing.assert_allclose(patches, _unit(np.asarray(out['tokens']) @ proj), atol=1e-5)

  segmentation = seg.segmentation_evaluator(encoder, eval_set, None)
  compositional = comp.compositional_evaluator(encoder, eval_set, encoder.images(images))
  scores = {'segmentation_miou', 'segmentation_miou_fg', 'segmentation_pixel_acc'}
  assert set(segmentation) == scores | {f'{name}_chance' for name in scores}
  assert set(compositional) == {'compositional_acc', 'compositional_pair_acc', 'compositional_chance'}
  for value in (*segmentation.values(), *compositional.values()):
    assert 0.0 <= value <= 1.0
  assert compositional['compositional_acc'] <= compositional['compositional_pair_acc']
