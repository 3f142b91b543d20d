"""COSMOS on the embedded dataset with the tiny model: the paper's recipe at small scale. An EMA teacher, two global
image views and a local crop (scale 0.05-0.4) with DINO's augmentations, two global text crops (1 to 5 sentences)
and a local one (one sentence) drawn from a text pool of the long caption's sentences and the short caption (as the
authors' code adds the raw caption), the cross-attention module and L_clip + L_cosmos at equal weight. Evaluation
uses the student's [cls] and [eot] embeddings, as the paper does (the teacher is logged as eval/<set>/teacher_*).

Its control is the paper's CLIP baseline (COSMOS Tab. 5, 19, 20): CLIP on the same images and text pool with COSMOS's
image augmentations and an EMA of the weights, lab/experiments/clip_text_pool_augment_ema.py. Its compute-matched
controls are CLIP on the text pool (`clip_text_pool_compute`) and plain CLIP on the short captions
(`clip_cosmos_compute`), each trained for as many FLOPs. `clip_text_pool` is CLIP on the text pool without
augmentation or EMA (Tab. 5 row 1), and `cosmos_no_distill` this recipe without L_cosmos. Scale adaptations
(docs/evidence.md):
  - The global image views are the whole image (the paper: RandomResizedCrop 0.4-1), as for every method's image-text
    pair on the 32 px scenes and as its control sees it; DINO's flips, colour jitter, blur and solarisation stay.
  - One local image crop (16 px) and one local text crop (16 tokens) instead of 6 + 6 (96 px, 77 tokens): each crop
    is another tower pass, and the run must stay short on a 2-core CPU.
  - Teacher momentum 0.99, the paper's value for its larger datasets (0.999 on CC3M over 32 epochs): at 0.999 the
    teacher of a 400-step run would still be mostly its initialisation.

python -m vlp_jax.main --config=configs/cosmos_shapes.py --workdir=/tmp/cosmos
"""
import os

from vlp_jax.config import from_file


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  config.objective.name = 'cosmos'
  config.objective.ema_momentum = 0.99
  config.objective.num_local_crops = 1
  config.objective.num_local_texts = 1
  config.objective.global_crop_scale = (1.0, 1.0)  # the whole image, as its control (see the docstring)
  config.objective.local_crop_scale = (0.05, 0.4)
  config.objective.local_crop_size = 16
  # A long-caption sentence of the embedded data is at most 11 tokens; the short caption, also in the pool, runs to
  # 22 (14% of them over 16), so a local crop that draws it is cut at 16, its EOT kept.
  config.objective.local_text_context_length = 16
  config.objective.caption_in_text_crops = True
  config.objective.caption_first_global = False
  config.objective.crop_color_jitter = (0.4, 0.4, 0.2, 0.1)
  config.objective.crop_grayscale_prob = 0.2
  config.objective.distill_weight = 1.0
  return config
