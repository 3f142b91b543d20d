"""ZeroVL on the embedded dataset with the tiny model: debiased sampling (every global batch from one of the three
synthetic sources, studio / web / sketch, drawn in proportion to size), coin-flipping mixup (alpha 0.1) and text
augmentation. The same model, data, budget and optimizer as configs/clip_shapes.py (a learned temperature, as there,
so that only ZeroVL's components differ; configs/zerovl_multisource.py has the paper's constant 0.02).

python -m vlp_jax.main --config=configs/zerovl_shapes.py --workdir=/tmp/zerovl
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.data.mixing = 'single_source'
  config.objective.name = 'zerovl'
  config.objective.mixup = True
  config.objective.mixup_alpha = 0.1
  config.objective.text_augment = True
  return config
