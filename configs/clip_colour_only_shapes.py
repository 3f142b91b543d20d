"""The control for configs/slip_shapes.py: CLIP on the same captions, which name the colours of the objects but never
their shapes (`config.data.synthetic.captions='colour_only'`), with the same model, budget, seed and optimizer as
configs/clip_shapes.py. What a model knows of shapes here it learns from the images alone, which is what SLIP's SimCLR
term adds; any difference between the two runs comes from that term.

python -m vlp_jax.main --config=configs/clip_colour_only_shapes.py --workdir=/tmp/clip_colour_only
"""
import os

from vlp_jax.config import from_file

LABEL = 'CLIP, colour-only captions (control for SLIP)'  # benchmarks/methods.py, run `clip_colour_only`
BASELINE = 'clip_colour_only'  # the CLIP of these captions is itself


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.data.synthetic.captions = 'colour_only'
  return config
