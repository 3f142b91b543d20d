"""Zero-shot and retrieval at NaFlex patch budgets (evaluation/naflex_budgets.py, config.eval.naflex_max_patches):
names that carry the budget, and scores equal to those of embeddings made image by image, without padding, from
`naflex_patches` of the eval images' pixels."""
import jax
import numpy as np

from vlp_jax import models, parallel
from vlp_jax.data.image import image_ops
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.image.naflex_patches import naflex_patches
from vlp_jax.evalsets.base import EvalSet
from vlp_jax.evaluation import Encoder, evaluate_variants
from vlp_jax.evaluation.retrieval import retrieval_metrics
from vlp_jax.evaluation.zeroshot import class_embeddings, zeroshot_metrics
from vlp_jax.losses.contrastive import l2_normalize
from vlp_jax.models.naflex_inputs import NaflexImages

BUDGETS = (4, 9)


def test_zeroshot_and_retrieval_at_each_budget_match_unpadded_embeddings(micro):
  config = micro
  config.model.vision.type = 'siglip_vit'
  preprocessing = image_ops.SIGLIP_PREPROCESSING
  model = models.build_model(config.model)
  variables = jax.jit(model.init)(jax.random.key(0), np.zeros((1, 16, 16, 3), np.float32),
                                  np.zeros((1, 16), np.int32))
  pixels = np.stack([records.decode_image(synthetic.make_example(0, 'test', 'studio', i, 16)['image'])
                     for i in range(6)])
  eval_set = EvalSet(name='toy', images=preprocessing.normalize(pixels), labels=np.arange(6) % 3,
                     class_names=('red circle', 'blue square', 'green triangle'), templates=('a {}.', 'the {}'),
                     captions=[f'caption {i}' for i in range(6)], caption_image=np.arange(6))
  encoder = Encoder(model, variables, parallel.make_mesh(), 4, config.model.text.context_length)
  results = evaluate_variants(encoder, [('', variables)], [eval_set], ('zeroshot', 'retrieval', 'affinity'),
                              naflex_max_patches=BUDGETS, preprocessing=preprocessing)
  assert not any(k.startswith('eval/toy/naflex4_affinity') for k in results)  # zero-shot and retrieval only
  embed = jax.jit(lambda p, s: l2_normalize(model.apply(variables, NaflexImages(p, s), method=model.encode_image)
                                            ['embed']))
  classes = class_embeddings(encoder.texts, eval_set.class_names, eval_set.templates)
  for budget in BUDGETS:
    rows = []
    for image in pixels:  # one image at a time, exactly its own patches: no padding, no batch
      patches, shape = naflex_patches(image, 4, budget, preprocessing)
      real = int(np.prod(shape))
      rows.append(np.asarray(embed(patches[None, :real], shape[None]))[0])
    want = {**zeroshot_metrics(np.stack(rows), classes, eval_set.labels),
            **retrieval_metrics(np.stack(rows), encoder.texts(eval_set.captions), eval_set.caption_image)}
    got = {k.removeprefix(f'eval/toy/naflex{budget}_'): v for k, v in results.items()
           if k.startswith(f'eval/toy/naflex{budget}_')}
    assert set(want) <= set(got) and 'zeroshot_top1' in got and 'i2t_r1' in got  # and the evaluators' extras
    np.testing.assert_allclose([got[k] for k in sorted(want)], [want[k] for k in sorted(want)], atol=1e-6)
