"""config.model.text.embedding_grad: every way of summing the token table's gradient gives the default's gradient,
on captions that are mostly padding (the pad token's row is where the default's scatter-adds pile up)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import jit_init
from vlp_jax import models
from vlp_jax.config import base_config, validate
from vlp_jax.errors import ConfigError
from vlp_jax.models.clip_model import EMBEDDING_GRADS, embed_tokens


def _padded_tokens(batch: int, length: int, vocab: int, seed: int = 0) -> np.ndarray:
  """[batch, length]: start token, 1-3 random ids, the EOT (highest id), then padding (0) to the end."""
  rng = np.random.default_rng(seed)
  tokens = np.zeros((batch, length), np.int32)
  for row in range(batch):
    words = int(rng.integers(1, 4))
    tokens[row, 0], tokens[row, words + 1] = vocab - 2, vocab - 1
    tokens[row, 1:words + 1] = rng.integers(1, vocab - 2, words)
  return tokens


@pytest.mark.parametrize('grad', ['sorted', 'drop_after_eot'])
def test_table_gradient_sums_the_kept_positions(grad):
  """Against numpy's unbuffered add: every position's cotangent into its token's row ('sorted'), or only the kept
  positions' ('drop_after_eot', whose dropped positions here carry nonzero cotangents, so a scatter that kept them
  would differ)."""
  rng = np.random.default_rng(1)
  table = rng.standard_normal((11, 3)).astype(np.float32)
  tokens = _padded_tokens(4, 7, 11)
  keep = np.arange(7)[None] <= tokens.argmax(-1)[:, None]
  cotangent = rng.standard_normal((4, 7, 3)).astype(np.float32)
  rows, pullback = jax.vjp(lambda t: embed_tokens(t, jnp.asarray(tokens), grad, jnp.asarray(keep)), table)
  np.testing.assert_array_equal(rows, table[tokens])
  expected = np.zeros_like(table)
  used = keep if grad == 'drop_after_eot' else np.ones_like(keep)
  np.add.at(expected, tokens[used], cotangent[used])
  np.testing.assert_allclose(pullback(jnp.asarray(cotangent))[0], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # three towers' gradients, eagerly (about 30 s of op-by-op dispatch)
@pytest.mark.parametrize('causal,pool,with_tokens', [(True, 'eot', False), (True, 'eot', True),
                                                     (False, 'last', False)])
def test_text_tower_gradients_equal_the_default_scatter(causal, pool, with_tokens):
  """The whole parameter gradient of a loss on the text tower's outputs, for each choice, against 'scatter': a
  causal tower pooled at the EOT (positions after it are dropped), one returning every row (nothing may be dropped),
  and a bidirectional one pooled at the last position (the padding reaches the feature)."""
  cfg = models.preset('tiny')
  cfg.embed_dim = 8
  cfg.text.update(context_length=12, width=8, layers=1, heads=2, vocab_size=50, causal=causal, pool=pool)
  tokens = jnp.asarray(_padded_tokens(6, 12, 50))
  model = models.build_model(cfg)
  params = jit_init(lambda key: models.init_variables(model, key)[0])(jax.random.key(0))  # one tree for all
  grads = {}
  for grad in EMBEDDING_GRADS:
    cfg.text.embedding_grad = grad
    model = models.build_model(cfg)

    def loss(p):
      out = model.apply({'params': p}, tokens, with_tokens, method=model.encode_text)
      return jnp.sum(jnp.sin(out['embed'])) + (jnp.sum(out['tokens'] ** 2) if with_tokens else 0.0)
    grads[grad] = jax.grad(loss)(params)  # eager: no compiler fusions that round each program its own way
  for grad in EMBEDDING_GRADS[1:]:
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6), grads[grad], grads['scatter'])


def test_an_unknown_embedding_grad_is_refused():
  config = base_config()
  config.model.text.embedding_grad = 'one_hot'
  with pytest.raises(ConfigError, match=r"config.model.text.embedding_grad='one_hot'.*'sorted'"):
    validate(config, num_devices=1)
