"""ZeroVL with all three of the paper's components on the embedded dataset (an ablation, not the recipe): debiased
sampling (every global batch from one of the three synthetic sources, studio / web / sketch, drawn in proportion to
size), coin-flipping mixup (alpha 0.1) and text augmentation (20% of tokens: 50% masked, 10% replaced, 40% deleted).
The same model, data, budget and optimizer as configs/clip_shapes.py.

An ablation against configs/zerovl_shapes.py, the recipe (mixup alone, on mixed batches), whose docstring says why
the other two components are off on this data; benchmarks/RESULTS.md (the ZeroVL ablations) has the figures.

python -m vlp_jax.main --config=configs/zerovl_debiased_shapes.py --workdir=/tmp/zerovl_debiased
"""
import os

from vlp_jax.config import from_file

# benchmarks/methods.py, run `zerovl_debiased`
LABEL = "ZeroVL with the paper's three components (single-source batches, mixup, text augmentation)"


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'zerovl_shapes.py'))
  config.data.mixing = 'single_source'
  config.objective.text_augment = True
  return config
