"""SLIP (CLIP + SimCLR, c = 1, tau = 0.1) with the tiny model, in the setting of the embedded dataset where its SimCLR
term has something to add: captions that name the colours of the objects but never their shapes
(`data.synthetic.captions='colour_only'`), so that what a model knows of shapes it learns from the images alone. The
same model, budget, seed and optimizer as configs/clip_shapes.py; its control is configs/clip_colour_only_shapes.py,
CLIP on the same captions. benchmarks/RESULTS.md, part 9, has the figures and the ablations behind each choice:

  - SimCLR views on random backgrounds (`ssl_background='random'`, from the records' class masks). Each web scene
    has its own random colour gradient, which matches two views of an image without looking at its objects: with
    the records' backgrounds SimCLR reaches 46% accuracy in 100 steps and its features follow the background
    (benchmarks/background_cue.py). SimCLR's colour distortion, which removes such cues from photos, would here erase
    half of every label, so a fresh background per view removes the cue instead.
  - The whole image as the CLIP view (`clip_crop_scale=(1, 1)`), not SLIP's RandomResizedCrop 0.5-1: at 32px the crop
    cuts objects out of images whose captions still name them (CLIP on the crop: zero-shot 0.194 against 0.682 at
    1600 steps).
  - The SimCLR views keep their colours (no hue jitter, no grayscale): the classes are colour + shape.
  - The SimCLR head is scaled to the tiny model (width 128): mlp_dim 512 and out_dim 128 instead of 4096 and 256.

Against clip_colour_only_shapes.py, seeds 0-2: linear probe +0.034 (3/3: +0.039, +0.023, +0.040), zero-shot +0.007
(3/3), mean R@1 level (-0.006); held-out seeds 3-4: linear probe +0.026 (2/2), zero-shot -0.004 +- 0.007 (level). The
zero-shot prompts name shapes that no caption taught the text tower, so SimCLR's shapes reach the probe, not them.

On the alt-text captions, which name every class's shape, SLIP is below CLIP: by -0.16 on the linear probe with the
records' backgrounds, and by -0.03 with random ones at 400 steps (`benchmarks/methods.py --methods=slip_background`).
SLIP's own views on alt-text are run `slip_paper_views` there, against configs/clip_crop_shapes.py. Each step runs
the image tower on three views: about 1.9x a CLIP step.

python -m vlp_jax.main --config=configs/slip_shapes.py --workdir=/tmp/slip
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
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
