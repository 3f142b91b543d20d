"""configs/siglip2_continue.py at small scale: continue a trained siglip2_shapes (or siglip_shapes) run with SigLIP
2's whole recipe from the first step: the towers and the attention-pooling head from the checkpoint; LocCa's decoder,
the self-distillation and masked-prediction heads and the mask token fresh; the EMA teacher starting as the loaded
image tower (and the fresh heads). One epoch of the embedded train split at a low constant learning rate, as
configs/clip_continue_shapes.py.

python -m vlp_jax.main --config=configs/siglip2_shapes.py --workdir=/tmp/siglip2
python -m vlp_jax.main --config=configs/siglip2_continue_shapes.py --workdir=/tmp/siglip2_continue \
    --config.init.checkpoint=/tmp/siglip2
"""
import math
import os

from vlp_jax.config import from_file


EPOCHS = 1
LR = 1e-5


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'siglip2_shapes.py'))
  train_examples = config.data.synthetic.num_train * len(config.data.synthetic.sources)
  config.total_steps = EPOCHS * math.ceil(train_examples / config.batch_size)
  config.init.require_checkpoint = True
  # the released model has been through the switch: the late losses run from the first step
  config.objective.distill_start_fraction = 0.0
  config.optim.update(lr=LR, warmup_init_lr=LR, warmup_steps=0, schedule='constant')
  config.eval.every_steps = config.total_steps
  config.checkpoint.every_steps = config.total_steps
  return config
