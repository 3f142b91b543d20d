"""SaCo's continue pre-training (Algorithm 2) on the embedded dataset: start from a trained clip_shapes run and add
alpha * L_saco to the CLIP loss for one epoch at a low constant learning rate, no mimic. The same budget as its
control, configs/clip_continue_shapes.py; the SaCo term is the only difference.

python -m vlp_jax.main --config=configs/clip_shapes.py --workdir=/tmp/run
python -m vlp_jax.main --config=configs/saco_continue_shapes.py --workdir=/tmp/saco_continue \
    --config.init.checkpoint=/tmp/run
"""
import os

from vlp_jax.config import from_file, with_term


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'clip_continue_shapes.py'))
  return with_term(config, 'saco', alpha=5.0, normalization='mean')
