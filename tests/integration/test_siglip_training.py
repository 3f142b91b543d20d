"""A SigLIP checkpoint (SigLIP's towers, its learned logit bias, SentencePiece tokens) continues pre-training and
evaluates like any other: with its own sigmoid loss (the bias it brought is the one trained), and with the CLIP loss
plus SaCo (Algorithm 2's recipe on SigLIP weights)."""
import jax
import numpy as np
import pytest
import sentencepiece

from vlp_jax import models
from vlp_jax import interchange as weights
from vlp_jax.config import with_term
from vlp_jax.errors import ConfigError
from vlp_jax.training.loop import train_and_evaluate

pytestmark = pytest.mark.slow  # each case trains and evaluates


def _spiece(directory) -> str:
  """A 48-piece SentencePiece model with SigLIP's special ids ('</s>' 1, '<unk>' 2), trained on the embedded
  captions' words."""
  rng = np.random.default_rng(0)
  words = ('a an the of photo drawing sketch small large red green blue yellow circle square triangle star heart '
           'ring cross on in with background scene studio shape and there is').split()
  sentences = [' '.join(rng.choice(words, size=rng.integers(3, 10))) for _ in range(2000)]
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences), model_prefix=str(directory / 'spiece'), vocab_size=48,
      model_type='unigram', pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2)
  return str(directory / 'spiece.model')


@pytest.fixture
def siglip_micro(micro, tmp_path):
  """The micro config with a SigLIP-shaped model (the preset's options, the micro sizes) and an 'imported' SigLIP
  checkpoint of random weights whose logit bias is not the init's."""
  model = models.preset('ViT-B-16-SigLIP')
  model.embed_dim = 32
  model.vision.update(image_size=16, patch_size=4, width=32, layers=1, heads=2)
  model.text.update(context_length=16, width=32, layers=1, heads=2, vocab_size=48,
                    tokenizer_path=_spiece(tmp_path))
  micro.model = model
  params, state = models.init_variables(models.build_model(model), jax.random.key(5))
  params = jax.tree.map(np.asarray, {**params, 'logit_bias': np.float32(-3.5)})
  path = weights.save_checkpoint(str(tmp_path / 'ckpt'), params, state, micro)
  micro.init.checkpoint = path
  micro.total_steps = 1
  micro.eval.tasks = ('zeroshot', 'retrieval')
  micro.optim.update(lr=1e-9, warmup_init_lr=1e-9, warmup_steps=0, schedule='constant')
  return micro, params


@pytest.mark.parametrize('objective', ['siglip', 'clip_saco'])
def test_a_siglip_checkpoint_trains_on_and_evaluates(siglip_micro, objective, tmp_path):
  config, imported = siglip_micro
  if objective == 'siglip':
    config.objective.name = 'siglip'
  else:
    with_term(config, 'saco', alpha=5.0, beta=0.0, normalization='mean')
  result = train_and_evaluate(config, str(tmp_path / 'run'))
  trained = jax.tree.map(np.asarray, result['state'].params)
  # Every imported tensor is where training started (one step at lr 1e-9), the bias included.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), trained, imported)
  metrics = result['eval']
  assert np.isfinite(metrics['eval/synthetic/zeroshot_top1']) and np.isfinite(metrics['eval/synthetic/i2t_r1'])


def test_cosmos_refuses_sentencepiece_tokens(siglip_micro):
  config, _ = siglip_micro
  config.objective.name = 'cosmos'
  with pytest.raises(ConfigError, match='tokenizer'):
    train_and_evaluate(config, '/nonexistent/never-written')
