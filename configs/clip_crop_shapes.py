"""An ablation config: CLIP on SLIP's own CLIP view (RandomResizedCrop of scale 0.5-1 instead of the centre crop of
configs/clip_shapes.py), with the same data, budget, seed and optimizer, as the SLIP paper trains its CLIP baseline on
the same view as SLIP. It is the control for SLIP with the paper's views on the alt-text captions
(`benchmarks/methods.py --methods=ablate_slip`, run `slip_paper_views`); at 32px the crop cuts objects out of images
whose captions still name them, and costs CLIP more than SimCLR gives back (benchmarks/RESULTS.md, parts 2-8).

python -m vlp_jax.main --config=configs/clip_crop_shapes.py --workdir=/tmp/clip_crop
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.data.crop_scale = (0.5, 1.0)
  return config
