"""notebooks/explore_checkpoint.ipynb: stored clean, and every code cell runs headless (no jupyter, Agg backend) on a
tiny random checkpoint, giving the numbers the library computes independently."""
import json
import os

import jax
import matplotlib
import numpy as np
import pytest

from support import ROOT
from vlp_jax import models
from vlp_jax import interchange as weights
from vlp_jax import evalsets
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.evaluation.affinity import affinity_consistency
from vlp_jax.evaluation.zeroshot import class_embeddings, zeroshot_metrics

NOTEBOOK = os.path.join(ROOT, 'notebooks',
                        'explore_checkpoint.ipynb')


def _load_notebook() -> dict:
  with open(NOTEBOOK, encoding='utf-8') as f:
    return json.load(f)


def _code_cells(notebook: dict) -> list[str]:
  return [''.join(cell['source']) for cell in notebook['cells'] if cell['cell_type'] == 'code']


def test_notebook_is_stored_clean():
  notebook = _load_notebook()
  assert notebook['nbformat'] == 4
  assert notebook['metadata']['kernelspec']['name'] == 'python3'
  code = [cell for cell in notebook['cells'] if cell['cell_type'] == 'code']
  assert code, 'the notebook has no code cells'
  for cell in code:
    assert cell['outputs'] == [] and cell['execution_count'] is None, 'clear the outputs before committing'
    # Magics and shell escapes need IPython; the notebook must also run as plain Python.
    assert not [line for line in ''.join(cell['source']).splitlines() if line.lstrip().startswith(('%', '!'))]


def _normalize(x) -> np.ndarray:
  x = np.asarray(x)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*non-interactive:UserWarning')  # plt.show() under Agg
def test_notebook_runs_on_a_tiny_checkpoint(micro, tmp_path, monkeypatch):
  model = models.build_model(micro.model)
  params, state = jax.jit(lambda rng: models.init_variables(model, rng))(jax.random.key(3))  # eager init is slow
  params = jax.tree.map(np.asarray, params)
  path = weights.save_checkpoint(str(tmp_path / 'ckpt'), params, state, micro)
  monkeypatch.setenv('VLP_CHECKPOINT', path)
  monkeypatch.setenv('VLP_EVAL_DATASET', 'synthetic')

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  plt.close('all')
  namespace = {'__name__': '__main__'}
  try:
    for n, source in enumerate(_code_cells(_load_notebook())):
      exec(compile(source, f'{NOTEBOOK} code cell {n}', 'exec'), namespace)  # noqa: S102
    figures = [plt.figure(num) for num in plt.get_fignums()]
    titles = ' | '.join(ax.get_title() for fig in figures for ax in fig.axes)
  finally:
    plt.close('all')

  assert namespace['checkpoint'] == path  # the environment variable, not the default workdir
  # The notebook's numbers against the library's on embeddings computed here without the Encoder.
  variables = {'params': params, **state}
  encode_image = jax.jit(lambda v, x: model.apply(v, x, method=model.encode_image)['embed'])
  encode_text = jax.jit(lambda v, t: model.apply(v, t, method=model.encode_text)['embed'])
  eval_set = evalsets.load_eval_set('synthetic', micro.data, 'test', micro.model.vision.image_size)
  image_emb = _normalize(encode_image(variables, eval_set.images))
  # Captions and class prompts in one call (one compile); prompts in the order class_embeddings builds them.
  prompts = [t.format(name) for name in eval_set.class_names for t in eval_set.templates]
  tokens = default_tokenizer()(eval_set.captions + prompts, context_length=micro.model.text.context_length)
  all_text = _normalize(encode_text(variables, tokens))
  text_emb, prompt_emb = all_text[:len(eval_set.captions)], all_text[len(eval_set.captions):]
  np.testing.assert_allclose(namespace['image_emb'], image_emb, atol=1e-5)

  zeroshot = namespace['zeroshot']
  classes = class_embeddings(lambda texts: prompt_emb, eval_set.class_names, eval_set.templates)
  want = zeroshot_metrics(image_emb, classes, eval_set.labels)
  assert set(zeroshot) == set(want)
  for name, value in zeroshot.items():
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(want[name], abs=1.0 / len(eval_set.labels) + 1e-9), name  # a near-tie may flip

  assert namespace['consistency'] == pytest.approx(affinity_consistency(image_emb, text_emb), abs=1e-5)
  assert namespace['rhos'].shape == (len(eval_set.images),)
  assert namespace['rhos'].mean() == pytest.approx(namespace['consistency'], abs=1e-4)

  # Zero-shot grid, text->image, image->text and the SaCo view; the scatter is titled with its query's rho.
  assert len(figures) == 4, titles
  assert f"Pearson ρ = {namespace['rhos'][namespace['QUERY_INDEX']]:.3f}" in titles
  assert f"affinity consistency = {namespace['consistency']:.3f}" in titles
