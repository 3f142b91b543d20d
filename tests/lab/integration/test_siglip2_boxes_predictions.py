"""lab/diagnostics/siglip2_boxes.py's predictions on a saved micro SigLIP 2 (decoder over the training texts, random
decoder weights so that its boxes vary): the boxes it predicts on the held-out pairs score exactly what the referring
evaluator scores on the same checkpoint, and on the flipped images it runs the same decoder on mirrored pixels."""
import jax
import numpy as np
import pytest

from support import micro_config
from lab.diagnostics import siglip2_boxes as boxes
from vlp_jax import evalsets, interchange, models, objectives, parallel
from vlp_jax.config import validate
from vlp_jax.data.text import locca_tasks
from vlp_jax.evaluation import Encoder, run_evaluations
from vlp_jax.objectives.siglip2 import DECODER


@pytest.mark.slow
def test_predictions_score_what_the_referring_evaluator_scores(data_cache, tmp_path):
  config = micro_config(data_cache)
  config.data.synthetic.regions = True
  config.objective.update(name='siglip2', distill_weight=0.0, masked_weight=0.0, decoder_weight=1.0,
                          decoder_box_bins=8, decoder_tasks=('aref',), decoder_vocabulary='train_texts')
  config.eval.tasks = ('referring',)
  validate(config)
  objective = objectives.build(config, models.build_model(config.model))
  params, state = jax.tree.map(np.asarray, jax.jit(objective.init_variables)(jax.random.key(0)))
  rng = np.random.default_rng(0)
  params[DECODER] = jax.tree.map(lambda p: p + rng.normal(0, 0.5, p.shape).astype(p.dtype), params[DECODER])
  checkpoint = interchange.save_checkpoint(str(tmp_path / 'model'), params, state, config)

  found = boxes.decoder_predictions(checkpoint)
  assert found['bins'] == 8 and found['split'] == 'test'
  true, index = found['true'], found['image_index']
  predicted = locca_tasks.dequantize_box(found['predicted'], 8)
  assert len(np.unique(predicted, axis=0)) > 1  # the random decoder's boxes vary, so the comparison can fail

  (eval_set,) = evalsets.load_eval_sets(config)
  variables = objective.eval_variants(params, state)['']
  encoder = Encoder(objective.model, variables, parallel.make_mesh(), batch_size=32)
  results = run_evaluations(encoder, [eval_set], ('referring',))
  scores = boxes.summary(true, predicted, locca_tasks.dequantize_box(found['predicted_flipped'], 8), index)
  for metric in ('acc50', 'miou'):
    assert scores[f'referring_decoder_{metric}'] == pytest.approx(results[f'eval/synthetic/referring_decoder_{metric}'],
                                                                  abs=1e-9)
  # the flipped images are the same images mirrored: the decoder route on them, by hand
  pairs = boxes.referring.region_pairs(eval_set.regions)
  by_hand = boxes.referring.decoder_boxes(encoder, params[DECODER], boxes.flipped_images(eval_set.images), *pairs[::2],
                                          boxes.referring.decoder_text_ids(variables))
  np.testing.assert_array_equal(locca_tasks.quantize_box(by_hand, 8), found['predicted_flipped'])
