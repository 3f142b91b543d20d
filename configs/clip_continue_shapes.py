"""The control for configs/saco_continue_shapes.py: continue a trained clip_shapes run with the CLIP loss alone,
with the same budget and optimizer (one epoch of the embedded train split, constant lr), so that any change the SaCo
run shows comes from the SaCo term, not from training longer.

python -m vlp_jax.main --config=configs/clip_shapes.py --workdir=/tmp/run
python -m vlp_jax.main --config=configs/clip_continue_shapes.py --workdir=/tmp/clip_continue \
    --config.init.checkpoint=/tmp/run
"""
import math
import os

from vlp_jax.config import from_file


EPOCHS = 1
LR = 1e-5  # low and constant, as SaCo's Algorithm 2 (1e-6 there, for a ViT-B at batch 2048 trained for 32 epochs)


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  train_examples = config.data.synthetic.num_train * len(config.data.synthetic.sources)
  config.total_steps = EPOCHS * math.ceil(train_examples / config.batch_size)
  config.init.require_checkpoint = True
  config.optim.update(lr=LR, warmup_init_lr=LR, warmup_steps=0, schedule='constant')
  config.eval.every_steps = config.total_steps
  config.checkpoint.every_steps = config.total_steps
  return config
