"""ZeroVL's ablations: one of its three components alone, chosen by the argument
(`--config=lab/experiments/zerovl_component.py:mixup`), with the recipe's temperature initialised at 0.02. Versus
its control clip_zerovl_temperature and the recipe configs/zerovl_shapes.py, which has all three components.
"""
import os

from vlp_jax.config import from_file

# component -> (the batches' sampler, coin-flipping mixup, word-level text augmentation)
COMPONENTS = {
    'mixup': ('mixed', True, False),  # mixed batches, no text augmentation
    'single_source': ('single_source', False, False),  # debiased batches, no mixup, no text augmentation
    'text_augment': ('mixed', False, True),  # mixed batches, no mixup
}


def get_config(component: str):
  if component not in COMPONENTS:
    raise ValueError(f'zerovl_component.py: unknown component {component!r}; choose one of {sorted(COMPONENTS)}')
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs',
                                  'zerovl_shapes.py'))
  config.data.mixing, config.objective.mixup, config.objective.text_augment = COMPONENTS[component]
  return config
