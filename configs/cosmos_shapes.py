"""COSMOS on the embedded dataset with the tiny model: an EMA teacher (momentum 0.99 for this short run), 2 global
(32px, scale 0.4-1) + 1 local (16px, scale 0.05-0.4) image crops, 2 global text crops (1-5 sentences of the long
caption, 32 tokens) + 1 local one (one sentence, 16 tokens), and the cross-attention module. The paper uses 6 + 6
local crops (configs/cosmos_cc3m.py does). Here 1 + 1 keep the run within 10 minutes on a 2-core CPU (about 580 s;
2 + 2 took 657 s). At this scale the text tower dominates the step, and every crop adds a text-tower pass. The
data, budget, seed and optimizer are the same as configs/clip_shapes.py. The eval reports the student; the teacher
is logged as eval/<dataset>/teacher_*.

python -m vlp_jax.main --config=configs/cosmos_shapes.py --workdir=/tmp/cosmos
"""
from vlp_jax.config import shapes_baseline


def get_config():
  config = shapes_baseline()
  config.objective.name = 'cosmos'
  config.objective.ema_momentum = 0.99
  config.objective.num_local_crops = 1
  config.objective.num_local_texts = 1
  config.objective.local_crop_size = 16
  config.objective.local_text_context_length = 16  # a sentence of the embedded captions is at most 14 tokens
  config.objective.caption_in_text_crops = False
  config.objective.crop_color_jitter = (0.4, 0.4, 0.2, 0.1)
  config.objective.crop_grayscale_prob = 0.2
  config.objective.distill_weight = 1.0
  return config
