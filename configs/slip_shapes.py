"""SLIP (CLIP + SimCLR on two augmented views, c = 1, tau = 0.1) on the embedded dataset with the tiny model: the
paper's recipe at small scale, on the same data, budget, seed and optimizer as configs/clip_shapes.py, its control.

The SimCLR views are the paper's: RandomResizedCrop 0.08-1, colour jitter (0.4, 0.4, 0.4, 0.1) with p 0.8,
grayscale with p 0.2, Gaussian blur with p 0.5 (SimCLR's kernel of a tenth of the side, 3 taps at 32 px) and a
horizontal flip. Two scale adaptations (docs/evidence.md):
  - The CLIP view is the whole image, as for every method's image-text pair on the 32 px scenes and as its control
    sees it (the paper: RandomResizedCrop 0.5-1; at 32 px a crop can cut out the object the caption names, a
    reason from how the scenes are made, not measured at the table's commit).
  - The SimCLR head is scaled to the tiny model's width 128: an MLP of 512 and an output of 128 (the paper: 4096 and
    256 for a width of 768).
Each step runs the image tower on three views; `clip_slip_compute` (lab/experiments/) is CLIP trained for as many
FLOPs. benchmarks/RESULTS.md has the comparison.

python -m vlp_jax.main --config=configs/slip_shapes.py --workdir=/tmp/slip
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.objective.name = 'slip'
  config.objective.ssl_scale = 1.0
  config.objective.ssl_temperature = 0.1
  config.objective.head_mlp_dim = 512
  config.objective.head_out_dim = 128
  config.objective.clip_crop_scale = (1.0, 1.0)  # the whole image, as its control (see the docstring)
  config.objective.ssl_crop_scale = (0.08, 1.0)
  config.objective.ssl_color_jitter = (0.4, 0.4, 0.4, 0.1)
  config.objective.ssl_grayscale_prob = 0.2
  config.objective.ssl_background = 'keep'
  return config
