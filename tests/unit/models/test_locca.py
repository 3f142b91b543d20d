"""LocCa's decoder (models/locca.py): causal or parallel self-attention, cross-attention to the image tokens, rows
independent of one another. One small program is compiled for all of them."""
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from vlp_jax.models import locca

VOCAB, LENGTH, TASKS, LATER = 19, 8, 3, 4
# Image 0: task 0 predicted in parallel; image 1: task 1. The others are causal.
FLAGS = np.array([[True, False, False], [False, True, False]])
DECODER = locca.LoccaDecoder(width=16, heads=2, layers=1, vocab_size=VOCAB, length=LENGTH)


def _random_params(decoder, image, inputs):
  """Parameters of the decoder's shapes, every one random and non-zero (no init program to compile)."""
  shapes = jax.eval_shape(decoder.init, jax.random.key(0), image, inputs)
  rng = np.random.default_rng(0)
  return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.standard_normal(s.shape), s.dtype), shapes)


@functools.lru_cache(maxsize=None)
def _outputs() -> dict[str, np.ndarray]:
  """The decoder's logits [2, T, L, V] for inputs and variants of them, from one compiled program: the variants
  that share parameters run as one batch (rows of a batch are independent: tested below)."""
  rng = np.random.default_rng(1)
  image = jnp.asarray(rng.standard_normal((2, 5, 12)), jnp.float32)
  inputs = jnp.asarray(rng.integers(0, VOCAB, (2, TASKS, LENGTH)), jnp.int32)
  params = _random_params(DECODER, image, inputs)
  position_noise = jnp.asarray(rng.standard_normal((LENGTH - LATER, 16)), jnp.float32)

  @jax.jit
  def run(params, image, inputs):
    flags = jnp.asarray(FLAGS)
    variants = {  # name: (images, inputs)
        'base': (image, inputs),
        'later_inputs': (image, inputs.at[:, :, LATER:].set((inputs[:, :, LATER:] + 1) % VOCAB)),
        'image_1': (image.at[1].multiply(-1.0), inputs),
        'task_1': (image, inputs.at[:, 1].set((inputs[:, 1] + 1) % VOCAB)),
    }
    images, texts = (jnp.concatenate(parts) for parts in zip(*variants.values()))
    logits = DECODER.apply(params, images, texts, jnp.tile(flags, (len(variants), 1)))
    out = dict(zip(variants, jnp.split(logits, len(variants))))
    moved = params['params']['positional_embedding'].at[LATER:].add(position_noise)
    out['later_positions'] = DECODER.apply({'params': {**params['params'], 'positional_embedding': moved}},
                                           image, inputs, flags)
    # One task per row of a [B * T, L] batch (T = 1), each with its image.
    single = DECODER.apply(params, jnp.repeat(image, TASKS, axis=0), inputs.reshape(-1, LENGTH), flags.reshape(-1))
    out['one_task_each'] = single.reshape(2, TASKS, LENGTH, VOCAB)
    return out
  return jax.tree.map(np.asarray, run(params, image, inputs))


def _moved(a, b):
  """[..., V] -> [...]: how far the logits moved."""
  return np.abs(a - b).max(axis=-1)


def test_shapes_and_vocabularies():
  image, inputs = jnp.zeros((2, 5, 12)), jnp.zeros((2, TASKS, LENGTH), jnp.int32)
  shapes = jax.eval_shape(DECODER.init, jax.random.key(0), image, inputs)['params']
  assert shapes['token_embedding']['embedding'].shape == (VOCAB + 1, 16)  # + MASK
  assert shapes['logits']['kernel'].shape == (16, VOCAB)  # its own output layer, not tied to the embedding
  assert jax.eval_shape(DECODER.apply, {'params': shapes}, image, inputs).shape == (2, TASKS, LENGTH, VOCAB)
  assert jax.eval_shape(DECODER.apply, {'params': shapes}, image, inputs[:, 0]).shape == (2, LENGTH, VOCAB)
  assert _outputs()['base'].shape == (2, TASKS, LENGTH, VOCAB)


def test_causal_rows_do_not_see_later_positions_and_parallel_rows_do():
  out = _outputs()
  causal = ~FLAGS
  for variant in ('later_inputs', 'later_positions'):
    moved = _moved(out['base'], out[variant])  # [B, T, L]
    assert moved[causal][:, :LATER].max() < 1e-5, variant
    assert moved[causal][:, LATER:].min() > 1e-4, variant
  # Parallel rows attend to every position: what lies after position t changes the output at t ...
  assert _moved(out['base'], out['later_positions'])[FLAGS][:, :LATER].min() > 1e-4
  # ... and their inputs are all MASK: the ids given change nothing.
  assert _moved(out['base'], out['later_inputs'])[FLAGS].max() < 1e-5
  np.testing.assert_array_equal(locca.attention_mask(jnp.array([True, False]), 3)[:, 0],
                                [np.ones((3, 3), bool), np.tril(np.ones((3, 3), bool))])


def test_the_image_tokens_reach_the_output_of_their_own_image_only():
  moved = _moved(_outputs()['base'], _outputs()['image_1'])
  assert moved[0].max() < 1e-5
  assert moved[1].min() > 1e-4  # every position of every task, parallel or causal


def test_task_rows_are_independent_sequences():
  out = _outputs()
  moved = _moved(out['base'], out['task_1'])
  assert moved[0, [0, 2]].max() < 1e-5 and moved[0, 1].min() > 1e-4  # image 0's task 1 is causal
  assert moved[1].max() < 1e-5  # image 1's task 1 is parallel: its ids are not read
  # One task per call ([B, L] inputs) gives the logits of the three in one call.
  np.testing.assert_allclose(out['one_task_each'], out['base'], atol=1e-5)


def test_decoder_for_text_tower_takes_width_heads_and_half_the_depth():
  text = ml_collections.ConfigDict({'width': 64, 'heads': 4, 'layers': 12, 'mlp_width': 200, 'ln_eps': 1e-6})
  decoder = locca.decoder_for_text_tower(text, vocab_size=VOCAB, length=LENGTH, act='gelu_tanh')
  assert (decoder.width, decoder.heads, decoder.layers, decoder.mlp_width, decoder.ln_eps) == (64, 4, 6, 200, 1e-6)
  assert locca.decoder_for_text_tower(text, VOCAB, LENGTH, 'gelu', layers=2).layers == 2
  text.layers = 1
  assert locca.decoder_for_text_tower(text, VOCAB, LENGTH, 'gelu').layers == 1


def test_inputs_longer_than_the_decoder_are_rejected():
  with pytest.raises(ValueError, match='exceed the decoder length'):
    jax.eval_shape(DECODER.init, jax.random.key(0), jnp.zeros((2, 5, 12)), jnp.zeros((2, 1, LENGTH + 1), jnp.int32))
