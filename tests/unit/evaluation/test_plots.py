"""Evaluation plots: per-query affinity consistency, t-SNE, histogram, retrieval examples and COSMOS cross-attention
maps, each written as a valid PNG; then everything that applies to the embedded eval set through a micro COSMOS."""
import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from matplotlib.markers import MarkerStyle
from scipy import stats

from support import micro_config
from vlp_jax import evalsets, models, objectives, parallel
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.image.image_ops import denormalize_image, normalize_image
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.evaluation import plots
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.objectives.base import example_rngs, tower_variables
from vlp_jax.evaluation.affinity import affinity_consistency, per_query_affinity_consistency
from vlp_jax.models.cross_attention import CrossAttention
from vlp_jax.models.transformer import LN_EPS

# The tests marked slow run t-SNE, compile a model or need the micro COSMOS (module fixtures): the quick loop leaves
# them out. The figure tests read what is drawn off the matplotlib figure, before it is saved.


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def assert_png(path, min_size=(100, 100)):
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  with Image.open(path) as image:
    image.verify()
  with Image.open(path) as image:
    assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1]


def _images(n, size=16, seed=0):
  return normalize_image(np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8))


# ------------------------------------------------------------------------------------------ affinity and images


@pytest.mark.slow
def test_per_query_affinity_against_pearson():
  rng = np.random.default_rng(0)
  images = _unit(rng.normal(size=(25, 6)))
  texts = _unit(images + 0.7 * rng.normal(size=(25, 6)))
  si, st = images @ images.T, texts @ texts.T
  want = [stats.pearsonr(np.delete(si[i], i), np.delete(st[i], i))[0] for i in range(25)]  # j != i
  got = per_query_affinity_consistency(images, texts, chunk=6)
  assert got.shape == (25,)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
  assert affinity_consistency(images, texts, chunk=6) == pytest.approx(np.mean(want), rel=1e-6)
  np.testing.assert_allclose(per_query_affinity_consistency(images, images), 1.0)


@pytest.mark.slow
def test_denormalize_inverts_normalize():
  pixels = np.random.default_rng(1).integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
  back = denormalize_image(normalize_image(pixels))
  assert back.dtype == np.uint8
  np.testing.assert_array_equal(back, pixels)
  np.testing.assert_array_equal(denormalize_image(normalize_image(pixels[0])), pixels[0])
  np.testing.assert_array_equal(denormalize_image(np.full((1, 1, 3), 99.0)), 255)  # out of range: clipped


# ------------------------------------------------------------------------------------------------------- plots


@pytest.mark.slow
def test_tsne_subsampling_is_deterministic():
  a = plots.subsample_indices(100, 30, seed=3)
  assert len(a) == 30 and len(np.unique(a)) == 30 and np.all(np.diff(a) > 0)
  np.testing.assert_array_equal(a, plots.subsample_indices(100, 30, seed=3))
  assert not np.array_equal(a, plots.subsample_indices(100, 30, seed=4))
  np.testing.assert_array_equal(plots.subsample_indices(20, 30), np.arange(20))
  emb = _unit(np.random.default_rng(2).normal(size=(60, 8)))
  keep, points = plots.tsne_points(emb, max_points=25, seed=1)
  keep2, points2 = plots.tsne_points(emb, max_points=25, seed=1)
  np.testing.assert_array_equal(keep, plots.subsample_indices(60, 25, seed=1))
  np.testing.assert_array_equal(keep, keep2)
  np.testing.assert_array_equal(points, points2)
  assert points.shape == (25, 2) and np.all(np.isfinite(points))
  assert plots.tsne_points(emb[:2])[1].shape == (2, 2)  # too few points for t-SNE: still plottable


@pytest.mark.slow
def test_plot_tsne_with_more_classes_than_the_legend(tmp_path):
  rng = np.random.default_rng(3)
  classes = plots.MAX_LEGEND + 5
  labels = rng.integers(-1, classes, 80)  # some unlabelled
  emb = _unit(rng.normal(size=(classes, 8))[np.maximum(labels, 0)] + 0.3 * rng.normal(size=(80, 8)))
  path = plots.plot_tsne(emb, labels, [f'class {i}' for i in range(classes)], str(tmp_path / 'sub' / 't.png'),
                         max_points=60)
  assert path == str(tmp_path / 'sub' / 't.png')
  assert_png(path)


def _tsne_inputs(class_names, n=300, seed=7):
  """points [n, 2] in one cluster per class, labels [n] with some unlabelled (-1) and some beyond the names."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(-1, len(class_names) + 1, n)
  points = rng.normal(size=(len(class_names) + 2, 2))[labels] * 10 + rng.normal(size=(n, 2))
  return points, labels


def _legend_entries(ax):
  legend = ax.get_legend()
  return {text.get_text(): handle for text, handle in zip(legend.get_texts(), legend.legend_handles)}


def _marker_vertices(collection):
  return collection.get_paths()[0].vertices


def test_named_style_is_what_an_embedded_class_name_says():
  markers = set()
  for name in synthetic.CLASS_NAMES:
    colour, marker = plots.named_style(name)
    colour_word, shape_word = name.split()
    np.testing.assert_allclose(colour[:3], np.array(synthetic.COLORS[colour_word]) / 255)
    assert marker == plots.SHAPE_MARKERS[shape_word]
    markers.add(marker)
  assert len(markers) == len(synthetic.SHAPES)  # one marker per shape
  for name in ('red fox', 'class 3', 'red', 'large red circle', 'circle red'):
    assert plots.named_style(name) is None
  _, generic = plots.class_styles(['red fox', 'red circle'])  # all or none: a palette for a mixed list
  assert generic == ['o', 'o']


def test_tsne_legend_shows_what_is_drawn_and_what_the_shapes_names_say():
  names = synthetic.CLASS_NAMES
  points, labels = _tsne_inputs(names)
  ax = plots.tsne_figure(points, labels, names, 'shapes').axes[0]
  drawn = {collection.get_label(): collection for collection in ax.collections}
  entries = _legend_entries(ax)
  present = {names[c] for c in labels if 0 <= c < len(names)}
  assert set(entries) == present | {'unlabelled'}  # all 36 classes fit in the legend
  for label, handle in entries.items():
    scatter = drawn[label]
    np.testing.assert_allclose(handle.get_facecolor(), scatter.get_facecolor())
    np.testing.assert_allclose(_marker_vertices(handle), _marker_vertices(scatter))
    if label == 'unlabelled':
      continue
    colour, marker = plots.named_style(label)
    np.testing.assert_allclose(scatter.get_facecolor()[0][:3], colour[:3])
    marker_style = MarkerStyle(marker)
    np.testing.assert_allclose(_marker_vertices(scatter),
                               marker_style.get_path().transformed(marker_style.get_transform()).vertices)
    rows = np.flatnonzero(labels == names.index(label))
    np.testing.assert_allclose(scatter.get_offsets(), points[rows])  # every point of the class, and only them


def test_tsne_legend_of_unnamed_classes_names_the_most_frequent_in_distinct_colours():
  names = [f'class {i}' for i in range(plots.MAX_LEGEND + 5)]
  points, labels = _tsne_inputs(names, n=600)
  ax = plots.tsne_figure(points, labels, names, 'many').axes[0]
  entries = _legend_entries(ax)
  present, counts = np.unique(labels[(labels >= 0) & (labels < len(names))], return_counts=True)
  assert len(entries) == plots.MAX_LEGEND + 1  # and 'unlabelled'
  least_named = min(counts[list(present).index(names.index(e))] for e in entries if e != 'unlabelled')
  left_out = [counts[i] for i, c in enumerate(present) if names[c] not in entries]
  assert left_out and max(left_out) <= least_named
  assert ax.get_legend().get_title().get_text() == f'{plots.MAX_LEGEND} of {len(present)} classes'
  drawn = {collection.get_label(): collection for collection in ax.collections}
  for label, handle in entries.items():
    np.testing.assert_allclose(handle.get_facecolor(), drawn[label].get_facecolor())
  colours = {tuple(np.round(c.get_facecolor()[0], 6)) for label, c in drawn.items() if label != 'unlabelled'}
  assert len(colours) == len(present)


def test_metric_colour_is_one_per_metric_and_stable():
  assert plots.metric_colour('eval/synthetic/i2t_r1') == plots.metric_colour('eval/flickr30k/i2t_r1')
  assert plots.metric_colour('eval/synthetic/i2t_r1') == plots.metric_colour('i2t_r1')
  known = [plots.metric_colour(name) for name in plots.METRIC_COLOURS]
  assert len(set(known)) == len(known)
  assert plots.metric_colour('some_new_score') == plots.metric_colour('eval/x/some_new_score')
  histogram = plots.affinity_histogram_figure(np.linspace(-0.5, 0.9, 40), label='synthetic').axes[0]
  assert {tuple(patch.get_facecolor()[:3]) for patch in histogram.patches} == {
      plots.metric_colour('affinity_consistency')[:3]}


@pytest.mark.slow
def test_plot_affinity_histogram(tmp_path):
  per_query = np.random.default_rng(4).uniform(-0.2, 0.9, 50)
  assert_png(plots.plot_affinity_histogram(per_query, str(tmp_path / 'h.png'), label='synthetic'))
  assert_png(plots.plot_affinity_histogram(per_query, str(tmp_path / 'h2.png')))


@pytest.mark.slow
def test_plot_retrieval_examples(tmp_path):
  rng = np.random.default_rng(5)
  image_emb = _unit(rng.normal(size=(6, 8)))
  caption_image = np.repeat(np.arange(6), 2)
  text_emb = _unit(image_emb[caption_image] + 0.8 * rng.normal(size=(12, 8)))
  captions = [f'caption {j} of image {i}, ' + 'long ' * (j % 3) * 20 for j, i in enumerate(caption_image)]
  np.testing.assert_array_equal(plots.query_indices(6, 4), [0, 2, 3, 5])
  np.testing.assert_array_equal(plots.query_indices(2, 4), [0, 1])
  path = plots.plot_retrieval_examples(_images(6), captions, caption_image, image_emb, text_emb,
                                       str(tmp_path / 'r.png'), num_queries=4, k=3)
  assert_png(path, (300, 300))


@pytest.mark.slow
def test_plot_cross_attention_and_token_strings(tmp_path):
  tokens = default_tokenizer()(['a red circle on white!', 'wow !!'], context_length=16)
  strings = [plots.token_strings(row) for row in tokens]
  assert strings[0] == ['<sot>', 'a', 'red', 'circle', 'on', 'white', '!', '<eot>']
  assert ''.join(strings[1][1:-1]) == 'wow!!'  # id 0 ('!' inside a word) is a token, not padding
  rng = np.random.default_rng(6)
  image_attention, text_attention = rng.dirichlet(np.ones(16), 2), rng.dirichlet(np.ones(16), 2)
  path = plots.plot_cross_attention(_images(2), ['a red circle on white!', 'wow !!'], image_attention,
                                    text_attention, strings, str(tmp_path / 'x.png'))
  assert_png(path)
  assert_png(plots.plot_cross_attention(_images(2, 8), ['a', 'b'], rng.dirichlet(np.ones(8), 2), text_attention,
                                        strings, str(tmp_path / 'y.png'), grid=(2, 4)))
  with pytest.raises(ValueError, match='square'):
    plots.plot_cross_attention(_images(2), ['a', 'b'], image_attention[:, :15], text_attention, strings,
                               str(tmp_path / 'z.png'))


# ------------------------------------------------------------------------------------- cross-attention weights


@pytest.mark.slow
def test_cross_attention_weights_leave_the_output_unchanged():
  query = jax.random.normal(jax.random.key(0), (2, 3, 16))
  tokens = jax.random.normal(jax.random.key(1), (2, 5, 8))
  mask = jnp.array([[True, True, True, False, False], [True] * 5])
  module = CrossAttention(16, heads=4)
  params = jax.jit(module.init)(jax.random.key(2), query, tokens)['params']
  apply = jax.jit(module.apply, static_argnames='return_weights')  # eager flax is slower than compiling
  out = apply({'params': params}, query, tokens, mask)
  same, weights = apply({'params': params}, query, tokens, mask, return_weights=True)
  np.testing.assert_array_equal(same, out)
  assert weights.shape == (2, 4, 3, 5) and weights.dtype == jnp.float32
  assert np.all(weights >= 0) and np.all(weights[0, ..., 3:] == 0)  # masked tokens get no weight
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
  # They are the weights the output is made of: out = query + out_proj(weights @ v).
  dense = lambda name, x: nn.Dense(16).apply({'params': params[name]}, x)  # noqa: E731
  kv = nn.LayerNorm(epsilon=LN_EPS).apply({'params': params['ln_kv']}, dense('token_proj', tokens))
  v = dense('v_proj', kv).reshape(2, 5, 4, 4)
  mixed = jnp.einsum('bhqt,bthd->bqhd', weights, v).reshape(2, 3, 16)
  np.testing.assert_allclose(query + dense('out_proj', mixed), out, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------- through a micro COSMOS model


@pytest.fixture(scope='module')
def cosmos(data_cache):
  """One micro COSMOS (student parameters, model state, objective), an Encoder of its towers and the embedded
  validation set."""
  config = micro_config(data_cache)
  config.objective.update(name='cosmos', num_local_crops=1, num_local_texts=1, local_crop_size=8,
                          local_text_context_length=8, cross_attention_heads=4)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jax.jit(objective.init_variables)(jax.random.key(0))
  encoder = Encoder(objective.model, tower_variables(params, state), parallel.make_mesh(), batch_size=16,
                    context_length=config.model.text.context_length)
  eval_set = evalsets.load_eval_set('synthetic', config.data, 'val', config.model.vision.image_size)
  return config, objective, params, state, encoder, eval_set


@pytest.mark.slow
def test_cross_attention_maps_are_those_of_the_cosmos_features(cosmos):
  config, objective, params, state, _, eval_set = cosmos
  images = eval_set.images[:4]
  tokens = default_tokenizer()(eval_set.captions[:4], context_length=config.model.text.context_length)
  out = plots.cross_attention_outputs(objective, params, state, images, tokens)
  image_attention, text_attention = out['image_attention'], out['text_attention']
  patches = (config.model.vision.image_size // config.model.vision.patch_size) ** 2
  assert image_attention.shape == (4, patches) and text_attention.shape == (4, tokens.shape[1])
  for weights in (image_attention, text_attention):
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
  after_eot = np.arange(tokens.shape[1])[None] > np.argmax(tokens, axis=1)[:, None]
  assert after_eot.any() and np.all(text_attention[after_eot] == 0)
  # The same modules on the same inputs as `features`, where this image and caption are the first global crops.
  rng = np.random.default_rng(0)
  batch = {'global_images': np.stack([images, images[::-1]], axis=1),
           'local_images': rng.normal(size=(4, 1, 8, 8, 3)).astype(np.float32),
           'texts': np.stack([tokens, tokens[::-1]], axis=1),
           'local_texts': default_tokenizer()(['a shape.'] * 4, context_length=8)[:, None]}
  keys = example_rngs(jax.random.key(1), 4)  # features takes one key per example
  features, _ = jax.jit(objective.features, static_argnums=4)(params, state, batch, keys, False)
  np.testing.assert_allclose(_unit(out['h_img']), features['h_img'][:, 0], atol=1e-5)
  np.testing.assert_allclose(_unit(out['h_txt']), features['h_txt'][:, 0], atol=1e-5)


@pytest.mark.slow
def test_write_eval_plots_on_the_embedded_eval_set(cosmos, tmp_path):
  _, _, _, _, encoder, eval_set = cosmos
  paths = plots.write_eval_plots(encoder, eval_set, str(tmp_path))
  names = ('synthetic_tsne.png', 'synthetic_affinity_hist.png', 'synthetic_retrieval.png')
  assert paths == [str(tmp_path / name) for name in names]
  for path in paths:
    assert_png(path)

  class NoEncoder:  # embeddings given: nothing is encoded again
    def images(self, x):
      raise AssertionError('encoded the images again')
    texts = images
  image_emb, text_emb = encoder.images(eval_set.images), encoder.texts(eval_set.captions)
  again = plots.write_eval_plots(NoEncoder(), eval_set, str(tmp_path / 'again'), image_emb, text_emb)
  assert [os.path.basename(p) for p in again] == list(names)
  classes_only = dataclasses.replace(eval_set, captions=[], caption_image=np.zeros(0, int))
  assert [os.path.basename(p) for p in plots.write_eval_plots(NoEncoder(), classes_only, str(tmp_path / 'c'),
                                                              image_emb)] == ['synthetic_tsne.png']
  bare = dataclasses.replace(classes_only, class_names=())
  assert plots.write_eval_plots(NoEncoder(), bare, str(tmp_path / 'none')) == []


@pytest.mark.slow
def test_write_cross_attention_plot(cosmos, tmp_path):
  config, objective, params, state, _, eval_set = cosmos
  path = plots.write_cross_attention_plot(objective, params, state, eval_set, str(tmp_path), num_examples=4)
  assert path == str(tmp_path / 'synthetic_cross_attention.png')
  assert_png(path, (300, 300))
  clip_config = config.copy_and_resolve_references()
  clip_config.objective.name = 'clip'
  clip = objectives.build(clip_config, objective.model)
  assert plots.write_cross_attention_plot(clip, params, state, eval_set, str(tmp_path)) is None
  assert plots.cosmos_objective(clip) is None
  # Found by its cross-attention, also inside a Composite (an objective with terms).
  assert plots.cosmos_objective(objective) is objective
  assert plots.cosmos_objective(objectives.Composite(objective, [])) is objective


@pytest.mark.slow
def test_encoder_embeds_a_caption_list_once_per_variables(cosmos):
  """Retrieval and affinity consistency ask for the same captions: the memo embeds them once, and forgets them when
  the encoder gets new variables."""
  config, objective, params, state, _, eval_set = cosmos
  encoder = Encoder(objective.model, tower_variables(params, state), parallel.make_mesh(), batch_size=16,
                    context_length=config.model.text.context_length)
  calls = []
  embed = encoder._texts
  encoder._texts = lambda v, t: calls.append(len(t)) or embed(v, t)
  captions = list(eval_set.captions[:20])
  first = encoder.texts(captions)
  assert calls and not first.flags.writeable  # shared by the memo's readers
  count = len(calls)
  np.testing.assert_array_equal(encoder.texts(captions), first)
  assert len(calls) == count  # from the memo
  np.testing.assert_array_equal(encoder.texts(captions[:5]), first[:5])  # another list is embedded
  assert len(calls) > count
  moved = jax.tree.map(lambda x: x + 0.01 if x.dtype == np.float32 else x, tower_variables(params, state))
  encoder.variables = moved
  count = len(calls)
  assert not np.allclose(encoder.texts(captions), first, atol=1e-4)  # new variables: embedded again
  assert len(calls) > count
