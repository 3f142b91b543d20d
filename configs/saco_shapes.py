"""CLIP + SaCo from scratch on the embedded dataset with the tiny model: SaCo's affinity consistency loss (Eq. 5-6)
with the one remedy for training from scratch that needs no teacher, the incremental alpha (alpha grows linearly from
0 to 5 over the whole run), and without the pseudo-affinity mimic. This is not Algorithm 1 as the supplementary
writes it (a constant alpha beside the mimic of a frozen teacher): that is `saco_constant`; `saco_mimic` adds the
mimic to this ramp, `saco_no_ramp` takes the constant alpha without the mimic. The same data, budget, seed and
optimizer as configs/clip_shapes.py, its control.

The affinity distance is the mean over the B x B entries ('mean'), not the literal sum of the pseudocode: the paper's
Figure 3b plots "the SaCo loss of Eq. 5" at the scale of the per-entry mean, and alpha = 5 on the sum would weigh the
term B^2 times more (16384 at batch 128), leaving the contrastive loss no say (not measured at the table's commit;
the one archived run of the sum went to chance: RESULTS_ARCHIVE.md, 2026-11-22, one seed, older code). The mechanism ablations are in
lab/experiments/: alpha 5 from the first step (`saco_no_ramp`), hard sample-wise masking (`saco_masking`) and
the pseudo-affinity mimic of a frozen CLIP teacher (`saco_mimic`, the paper's best from-scratch recipe, which needs
a teacher: here a CLIP of the same budget trained with another seed, so its compute is twice the control's).
Continue pre-training (Algorithm 2) is configs/saco_continue_shapes.py.

python -m vlp_jax.main --config=configs/saco_shapes.py --workdir=/tmp/saco
"""
import os

from vlp_jax.config import from_file, with_term


def get_config():
  config = from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'shapes_base.py'))
  return with_term(config, 'saco', alpha=5.0, normalization='mean', ramp='linear', ramp_steps=0)  # 0: the whole run
