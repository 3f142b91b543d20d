"""The control of COSMOS: CLIP on the same images and the same text pool as configs/cosmos_shapes.py. Its text is one
text crop (1 to 5 sentences of the long caption and the short caption), drawn exactly as COSMOS draws its first global
text crop, and its image the whole image, as COSMOS's global views; the same model, budget and seed.
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'configs', 'clip_shapes.py'))
  config.objective.text_source = 'text_crops'
  config.objective.caption_in_text_crops = True
  config.objective.text_crop_max_sentences = 5
  return config
