"""Each method trains end to end through `train_and_evaluate` on the micro config and logs its own metrics: CLIP +
SaCo with a teacher (pre-extracted embeddings from `vlp_jax.embed`, or another run's checkpoint), SLIP, COSMOS and
ZeroVL. The objectives' losses and gradients are tested without training in tests/unit/objectives/."""
import chex
import jax
import numpy as np
import pytest

from vlp_jax import interchange, models, parallel
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.cli import embed_command
from vlp_jax.config import with_term
from vlp_jax.training.loop import train_and_evaluate
from vlp_jax.training.writer import read_metrics


def _logged(workdir) -> set[str]:
  return set().union(*read_metrics(str(workdir)))


@pytest.mark.slow
def test_mimic_end_to_end_with_pre_extracted_teacher(micro, tmp_path):
  """Embed the training split with a 'teacher' checkpoint, then train CLIP + SaCo + mimic on it."""
  params, state = models.init_variables(models.build_model(micro.model), jax.random.key(9))
  teacher = interchange.save_checkpoint(str(tmp_path / 'teacher'), jax.tree.map(np.asarray, params), state, micro)
  table = str(tmp_path / 'teacher.npz')
  embed_command.run(teacher, table, dataset='synthetic', split='train', batch_size=32)
  micro.data.teacher_embeddings = table
  with_term(micro, 'saco', alpha=1.0, beta=1.0, normalization='mean')
  micro.total_steps = 2
  micro.eval.datasets = ()  # evaluation is tested elsewhere (each task compiles its own encode function)
  result = train_and_evaluate(micro, str(tmp_path / 'run'))
  assert {'train/mimic_loss', 'train/saco_loss', 'train/clip_loss'} <= _logged(tmp_path / 'run')
  assert int(result['state'].step) == 2


@pytest.mark.slow
def test_a_run_trains_with_a_teacher_from_a_training_checkpoint(micro, tmp_path):
  """The trainer creates its state in a jitted function: the teacher of another run's workdir is read before it."""
  micro.total_steps = 2
  micro.eval.datasets = ()  # neither run's evaluation is checked here
  train_and_evaluate(micro, str(tmp_path / 'teacher'))
  with_term(micro, 'saco', alpha=1.0, beta=2.0, normalization='mean', teacher='checkpoint',
            teacher_checkpoint=str(tmp_path / 'teacher'))
  result = train_and_evaluate(micro, str(tmp_path / 'run'))
  assert int(result['state'].step) == 2
  teacher = result['state'].model_state['saco_teacher']
  want = load_variables(str(tmp_path / 'teacher'))[0]['visual']
  chex.assert_trees_all_equal(parallel.to_host(teacher['params']['visual']), want)  # frozen: still the teacher's


@pytest.mark.slow
def test_slip_logs_the_ssl_loss(micro, tmp_path):
  micro.objective.name = 'slip'
  micro.objective.update(head_mlp_dim=64, head_out_dim=16)
  micro.total_steps = 2
  micro.eval.datasets = ()  # evaluation is tested elsewhere
  result = train_and_evaluate(micro, str(tmp_path / 'run'))
  assert {'train/ssl_loss', 'train/ssl_acc', 'train/clip_loss'} <= _logged(tmp_path / 'run')
  assert int(result['state'].step) == 2


@pytest.mark.slow
def test_cosmos_logs_its_loss_and_evaluates_the_teacher(micro, tmp_path):
  micro.objective.name = 'cosmos'
  micro.objective.update(num_local_crops=2, num_local_texts=2, local_crop_size=8, local_text_context_length=8,
                         cross_attention_heads=4)
  micro.total_steps = 2
  micro.eval.every_steps = 2
  micro.eval.tasks = ('zeroshot',)  # the teacher's variant of one task shows it is evaluated
  train_and_evaluate(micro, str(tmp_path))
  assert {'train/cosmos_loss', 'train/clip_loss', 'eval/synthetic/zeroshot_top1',
          'eval/synthetic/teacher_zeroshot_top1'} <= _logged(tmp_path)


@pytest.mark.slow
def test_zerovl_single_source_run_logs_mixup(micro, tmp_path):
  micro.objective.name = 'zerovl'
  micro.data.mixing = 'single_source'
  micro.update(total_steps=2, log_every_steps=1)
  micro.eval.datasets = ()  # evaluation is tested elsewhere
  result = train_and_evaluate(micro, str(tmp_path / 'run'))
  assert int(result['state'].step) == 2
  logged = [r for r in read_metrics(str(tmp_path / 'run')) if 'train/mixup_loss' in r]
  assert len(logged) == 2 and all(np.isfinite(r['train/mixup_loss']) for r in logged)
  assert all(0.0 <= r['train/mixup_lambda'] <= 1.0 and r['train/mixup_coin'] in (0.0, 1.0) for r in logged)
