"""SaCo as a term that adds to any objective: alpha L_saco (with an optional ramp and sample-wise masking) plus
beta L_mimic, the pseudo-affinity of a frozen, well-trained image encoder. The mimic targets come either
pre-extracted (`teacher='embeddings'`: `config.data.teacher_embeddings`, attached by the pipeline as
batch['teacher']; cheapest) or computed in the step (`teacher='checkpoint'`: `teacher_checkpoint`, any vlp_jax
checkpoint, trained or imported; its image tower runs on the batch's CLIP view without gradient, and its weights are
kept in the model state, so they are checkpointed with the run).

Deliberate deviation: the affinity distance is normalised as a mean over the B x B entries by default, where the
pseudocode writes np.sum. The paper's Figure 3b plots "the SaCo loss of Eq. 5" at about 0.15 for CLIP, the size of
the per-entry mean (a trained clip_shapes run: 0.135; the sum would be about 2e3 at B = 128), and its alpha sweep is
unimodal around 5, which the sum (weighing the term B^2 times more, 4 million times at B = 2048) could not give: with
it the contrastive loss has no say and training collapses to chance (benchmarks/RESULTS_ARCHIVE.md, 2026-11-22).
'sum' stays available.
"""
from __future__ import annotations

import jax

from vlp_jax import models
from vlp_jax.checkpoint_files import load_variables, read_saved_config
from vlp_jax.errors import MissingInputError
from vlp_jax.losses import affinity_consistency as saco
from vlp_jax.objectives.base import TERMS, Term, tower_variables
from vlp_jax.registry import check_choice

TEACHERS = ('embeddings', 'checkpoint')  # where the mimic targets come from


@TERMS.register('saco')
class SacoTerm(Term):

  @classmethod
  def default_config(cls):
    return {
        'alpha': 5.0,  # SaCo paper, Figure 6
        'beta': 0.0,  # pseudo-affinity mimic weight (5.0 in the paper from scratch; needs teacher embeddings)
        # 'mean' (/B^2, the scale of the paper's Figure 3b) | 'row_mean' (/B) | 'sum' (the pseudocode's np.sum).
        # With masking, B is the kept count K = sum_i w_i: 'mean' divides by the kept pairs K^2, 'sum' sums over them.
        'normalization': 'mean',
        'ramp': 'constant',  # 'linear' | 'exponential' | 'polynomial': alpha grows over ramp_steps
        'ramp_steps': 0,  # 0: the whole run (config.total_steps)
        'ramp_power': 2.0,
        'ramp_rate': 5.0,
        # 'hard' | 'soft': sample-wise masking by each image-text pair's cosine (weight w_i: 1 above mask_threshold,
        # else 0; or the cosine clipped to [0, 1]). Entry (i, j) weighs w_i w_j: a masked sample drops out as a query
        # and as a neighbour, and gets no gradient from the term. The mimic term is never masked.
        'masking': 'none',
        'mask_threshold': 0.5,  # our choice: the paper thresholds the cosine but gives no value
        'teacher': 'embeddings',  # where the mimic targets come from: 'embeddings' | 'checkpoint'
        'teacher_checkpoint': '',
    }

  @classmethod
  def validate(cls, term_config, config):
    for key, choices in (('normalization', saco.NORMALIZATIONS), ('ramp', saco.RAMPS), ('masking', saco.MASKINGS),
                         ('teacher', TEACHERS)):
      check_choice(f'objective.saco.{key}', term_config[key], choices)
    if term_config.ramp_steps < 0:
      raise ValueError(f'config.objective.saco.ramp_steps={term_config.ramp_steps} must be >= 0 (0 = the whole run)')
    if term_config.beta > 0 and term_config.teacher == 'checkpoint' and not term_config.teacher_checkpoint:
      raise MissingInputError("config.objective.saco.teacher='checkpoint' needs "
                              'config.objective.saco.teacher_checkpoint (a vlp_jax checkpoint, e.g. one imported with '
                              '`python -m vlp_jax.weights import`)')
    if term_config.beta > 0 and term_config.teacher == 'embeddings' and not config.data.teacher_embeddings:
      raise MissingInputError('config.objective.saco.beta > 0 (pseudo-affinity mimic) needs teacher embeddings: write '
                              'them with `python -m vlp_jax.embed --checkpoint=TEACHER --dataset=... --split=train '
                              '--output=teacher.npz` and set config.data.teacher_embeddings=teacher.npz')

  def __init__(self, config, run_config=None):
    super().__init__(config, run_config)
    self.ramp_steps = config.ramp_steps or (run_config.total_steps if run_config is not None else 0)
    if config.ramp != 'constant' and self.ramp_steps < 1:
      raise ValueError(f"config.objective.saco.ramp='{config.ramp}' needs config.objective.saco.ramp_steps > 0 or "
                       'the run config (whose total_steps it then follows)')
    self.teacher_model, self.teacher_variables = None, None
    if config.beta > 0 and config.teacher == 'checkpoint':
      self.teacher_model = models.build_model(models.complete(read_saved_config(config.teacher_checkpoint)['model']))
      # Read now, on the host: init_state runs inside the jitted (or shape-only) creation of the train state, where
      # a checkpoint cannot be read; there the arrays become the initial values of the frozen teacher's state.
      self.teacher_variables = tower_variables(*load_variables(config.teacher_checkpoint))

  def init_state(self):
    if self.teacher_model is None:
      return {}
    return {'saco_teacher': self.teacher_variables}

  def features(self, params, model_state, batch, features):
    del params, features
    if self.config.beta <= 0:
      return {}
    if self.teacher_model is None:
      return {'teacher': batch['teacher']}
    # The frozen teacher runs in eval mode (train=False): deterministic, so it takes no tower keys.
    teacher = jax.lax.stop_gradient(model_state['saco_teacher'])
    return {'teacher': self.teacher_model.apply(teacher, batch['image'], with_tokens=False,
                                                method=self.teacher_model.encode_image)['embed']}

  def loss(self, features, params, step):
    c = self.config
    zi, zt = features['zi'], features['zt']
    alpha = saco.ramp_weight(step, c.alpha, c.ramp, self.ramp_steps, c.ramp_power, c.ramp_rate)
    weights = saco.pair_weights(zi, zt, c.masking, c.mask_threshold)
    saco_loss = saco.saco_loss(zi, zt, weights, c.normalization)
    metrics = {'saco_loss': saco_loss, 'saco_alpha': alpha,
               'affinity_consistency': jax.lax.stop_gradient(saco.affinity_consistency(zi, zt))}
    total = alpha * saco_loss
    if weights is not None:
      metrics['saco_kept_fraction'] = weights.mean()  # of the samples; of the pairs, its square
    if c.beta > 0:
      mimic = saco.mimic_loss(zi, features['teacher'], c.normalization)
      metrics['mimic_loss'] = mimic
      total = total + c.beta * mimic
    return total, metrics
