"""The control for configs/slip_shapes.py: CLIP on the same captions, which name the colours of the objects but never
their shapes (`config.data.synthetic.captions='colour_only'`), with the same model, budget, seed and optimizer as
configs/clip_shapes.py. What a model knows of shapes here it learns from the images alone, which is what SLIP's SimCLR
term adds; any difference between the two runs comes from that term.

python -m vlp_jax.main --config=configs/clip_colour_only_shapes.py --workdir=/tmp/clip_colour_only
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.data.synthetic.captions = 'colour_only'
  return config
