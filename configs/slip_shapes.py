"""SLIP (CLIP + SimCLR, c = 1, tau = 0.1) with the tiny model, in the setting of the embedded dataset where its SimCLR
term has something to add: captions that name the colours of the objects but never their shapes
(`data.synthetic.captions='colour_only'`), so that what a model knows of shapes it learns from the images alone. The
same model, budget, seed and optimizer as configs/clip_shapes.py; its control is configs/clip_colour_only_shapes.py,
CLIP on the same captions. benchmarks/RESULTS.md, part 9, has the figures and the ablations behind each choice:

  - SimCLR views on random backgrounds (`ssl_background='random'`, from the records' class masks). Each web scene
    has its own random colour gradient, which matches two views of an image without looking at its objects
    (benchmarks/background_cue.py measures how far the features follow it). SimCLR's colour distortion, which removes
    such cues from photos, would here erase half of every label, so a fresh background per view removes the cue
    instead.
  - The whole image as the CLIP view (`clip_crop_scale=(1, 1)`), not SLIP's RandomResizedCrop 0.5-1: at 32px the crop
    cuts objects out of images whose captions still name them.
  - The SimCLR views keep their colours (no hue jitter, no grayscale): the classes are colour + shape.
  - The SimCLR head is scaled to the tiny model (width 128): mlp_dim 512 and out_dim 128 instead of 4096 and 256.

On the alt-text captions, which name every class's shape, the SLIP ablations are in configs/experiments/slip_*.py
(`benchmarks/methods.py --methods=ablate_slip`, `slip_background`); SLIP's own views on alt-text are run
`slip_paper_views`, against configs/clip_crop_shapes.py. Each step runs the image tower on three views.

python -m vlp_jax.main --config=configs/slip_shapes.py --workdir=/tmp/slip
"""
import os

from vlp_jax.config import from_file

LABEL = 'SLIP (colour-only captions)'  # benchmarks/methods.py, run `slip`
BASELINE = 'clip_colour_only'


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.data.synthetic.captions = 'colour_only'
  config.objective.name = 'slip'
  config.objective.ssl_scale = 1.0
  config.objective.ssl_temperature = 0.1
  config.objective.head_mlp_dim = 512
  config.objective.head_out_dim = 128
  config.objective.clip_crop_scale = (1.0, 1.0)
  config.objective.ssl_crop_scale = (0.08, 1.0)
  config.objective.ssl_color_jitter = (0.4, 0.4, 0.4, 0.0)  # brightness, contrast, saturation; no hue jitter
  config.objective.ssl_grayscale_prob = 0.0
  config.objective.ssl_background = 'random'
  return config
