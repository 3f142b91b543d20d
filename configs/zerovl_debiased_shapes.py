"""ZeroVL with all three of the paper's components on the embedded dataset (an ablation, not the recipe): debiased
sampling (every global batch from one of the three synthetic sources, studio / web / sketch, drawn in proportion to
size), coin-flipping mixup (alpha 0.1) and text augmentation (20% of tokens: 50% masked, 10% replaced, 40% deleted).
The same model, data, budget and optimizer as configs/clip_shapes.py.

On this data it ends far below CLIP (benchmarks/RESULTS.md): single-source batches of templated captions are full of
duplicate captions (false negatives), and the token-level augmentation erases class words of the short captions.
configs/zerovl_shapes.py is the setting where ZeroVL's mixup works here.

python -m vlp_jax.main --config=configs/zerovl_debiased_shapes.py --workdir=/tmp/zerovl_debiased
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'zerovl_shapes.py'))
  config.data.mixing = 'single_source'
  config.objective.text_augment = True
  return config
