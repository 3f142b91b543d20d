"""`evaluate_variants`, the loop the training loop and `python -m vlp_jax.evaluate` share: each variant's variables
in turn, its metrics under its prefix, the variants taken one at a time."""
import types

import numpy as np

from vlp_jax.evaluation import EVALUATORS, Evaluator, evaluate_variants


class VariablesEncoder:
  """An encoder whose images embed as they are; the evaluator below reads its current variables."""
  variables = None

  def images(self, images):
    return np.asarray(images, np.float32)


def _weight(encoder, eval_set, image_emb):
  return {'weight': encoder.variables['w'], 'rows': len(image_emb)}


def test_each_variant_is_evaluated_with_its_variables_under_its_prefix(monkeypatch):
  monkeypatch.setitem(EVALUATORS, 'weight', Evaluator(_weight, (('images',),)))
  eval_sets = [types.SimpleNamespace(name='toy', images=np.zeros((3, 2))),
               types.SimpleNamespace(name='other', images=np.zeros((2, 2)))]
  encoder, taken, reported = VariablesEncoder(), [], []

  def variants():  # lazy, as the command's: each placed only when its turn comes
    for prefix, w in (('', 1.0), ('teacher_', 2.0), ('ema_', 3.0)):
      taken.append(prefix)
      yield prefix, {'w': w}

  def after_variant(prefix, seconds):
    reported.append((prefix, encoder.variables['w'], tuple(taken)))
    assert seconds >= 0

  results = evaluate_variants(encoder, variants(), eval_sets, ('weight',), after_variant=after_variant)
  assert results == {'eval/toy/weight': 1.0, 'eval/toy/rows': 3, 'eval/other/weight': 1.0, 'eval/other/rows': 2,
                     'eval/toy/teacher_weight': 2.0, 'eval/toy/teacher_rows': 3,
                     'eval/other/teacher_weight': 2.0, 'eval/other/teacher_rows': 2,
                     'eval/toy/ema_weight': 3.0, 'eval/toy/ema_rows': 3,
                     'eval/other/ema_weight': 3.0, 'eval/other/ema_rows': 2}
  assert list(results)[:4] == ['eval/toy/weight', 'eval/toy/rows', 'eval/other/weight', 'eval/other/rows']
  # Called while the encoder holds the variant's variables, before the next variant is taken.
  assert reported == [('', 1.0, ('',)), ('teacher_', 2.0, ('', 'teacher_')), ('ema_', 3.0, ('', 'teacher_', 'ema_'))]
  assert evaluate_variants(encoder, {'': {'w': 5.0}}.items(), eval_sets[:1], ('weight',)) == {
      'eval/toy/weight': 5.0, 'eval/toy/rows': 3}
