"""What evaluation tells a user: embedding progress on one line, which evaluators run on which set (and, with
--verbose, why the others cannot), where
an evaluation's results go (`results_key`), and the end-of-training summary with chance levels and what to do next."""
import io
import types

import numpy as np

from vlp_jax.evaluation import encoder as encoder_lib
from vlp_jax.cli import common
from vlp_jax.evaluation import evaluated_line, report_evaluated, run_evaluations, skipped_tasks
from vlp_jax.evaluation.results import chance_level, results_key, summary_lines
from vlp_jax.training.progress import end_summary


class Terminal(io.StringIO):
  def isatty(self):
    return True


def test_embedding_progress_is_one_line_in_a_log_and_rewritten_in_place_on_a_terminal():
  log = io.StringIO()
  progress = encoder_lib.EmbeddingProgress(600, 'images', log)
  for done in range(30, 601, 30):
    progress.update(done)
  progress.finish()
  assert log.getvalue().count('\n') == 1 and '\r' not in log.getvalue()
  assert log.getvalue().startswith('  embedded 600 images in ')

  terminal = Terminal()
  progress = encoder_lib.EmbeddingProgress(600, 'images', terminal)
  for done in range(30, 601, 30):
    progress.update(done)
  progress.finish()
  text = terminal.getvalue()
  assert text.count('\n') == 1 and text.endswith('\n')  # one line, updated 20 times, then the final one
  assert text.count('\r') == 21 and '\r  embedding images: 300/600 (' in text
  assert text.rsplit('\r', 1)[1].startswith('  embedded 600 images in ')


class ImagesEncoder:
  batch_size = 8

  def images(self, images):
    return np.asarray(images, np.float32)

  def texts(self, captions):
    return np.eye(len(captions), 2, dtype=np.float32)


def _digits_and_coco():
  classes = types.SimpleNamespace(name='digits', images=np.eye(4, 2), labels=np.arange(4), class_names=('a', 'b'),
                                  templates=('{}',), captions=[], caption_image=np.zeros(0, int))
  captioned = types.SimpleNamespace(name='coco', images=np.eye(2), labels=-np.ones(2, int), class_names=(),
                                    templates=(), captions=['x', 'y'], caption_image=np.arange(2))
  return classes, captioned


def test_a_caption_less_set_says_once_which_evaluators_it_skips_and_why(capsys):
  classes, captioned = _digits_and_coco()
  lines = skipped_tasks([classes, captioned], ('zeroshot', 'retrieval', 'affinity', 'compositional'))
  assert lines == [
      'digits: retrieval, affinity skipped (no captions); compositional skipped (no canonical_captions and '
      'hard_negatives, nor winoground_captions)',
      'coco: zeroshot skipped (no class_names and templates); compositional skipped (no canonical_captions and '
      'hard_negatives, nor winoground_captions)']
  assert skipped_tasks([captioned], ('retrieval',)) == []
  # Evaluating skips them without a word each time: what runs is said once, when the sets are loaded.
  results = run_evaluations(ImagesEncoder(), [classes], ('retrieval',))
  assert results == {} and capsys.readouterr().out == ''


def test_what_is_evaluated_is_one_line_and_the_reasons_wait_for_verbose(capsys):
  classes, captioned = _digits_and_coco()
  other = types.SimpleNamespace(**{**vars(captioned), 'name': 'flickr'})
  tasks = ('zeroshot', 'retrieval')
  assert evaluated_line([classes, captioned, other], tasks) == (
      'Eval sets: digits (zeroshot); coco, flickr (retrieval); tasks not listed do not apply (--verbose says why)')
  assert evaluated_line([captioned], ('retrieval',)) == 'Eval sets: coco (retrieval)'  # nothing skipped
  assert evaluated_line([classes], ('retrieval',)) == (
      'Eval sets: digits (no task applies); tasks not listed do not apply (--verbose says why)')
  assert evaluated_line([], tasks) == ''
  try:
    common.show_details(False)  # what training and the evaluate command print by default
    report_evaluated([classes, captioned], tasks)
    assert capsys.readouterr().out == (
        'Eval sets: digits (zeroshot); coco (retrieval); tasks not listed do not apply (--verbose says why)\n')
    common.show_details(True)  # --verbose: the reasons too, once per set
    report_evaluated([classes, captioned], tasks)
    assert capsys.readouterr().out.splitlines()[1:] == [
        'Eval set digits: retrieval skipped (no captions)', 'Eval set coco: zeroshot skipped (no class_names and '
        'templates)']
  finally:
    common.show_details(False)
  report_evaluated([], tasks)
  assert capsys.readouterr().out == ''


def test_results_key_separates_eval_sets_splits_and_settings():
  synthetic = results_key(('synthetic',), 'test', {})
  assert synthetic == 'synthetic-test' and results_key(('synthetic', 'digits'), 'test', {}) == 'synthetic+digits-test'
  assert results_key(('synthetic',), 'val', {}) != synthetic != results_key(('digits',), 'test', {})
  zeroshot = results_key(('synthetic',), 'test', {'eval.tasks': ['zeroshot']})
  assert zeroshot.startswith('synthetic-test-') and len(zeroshot) == len(synthetic) + 7
  assert zeroshot == results_key(('synthetic',), 'test', {'eval.tasks': ['zeroshot']})  # the same request, again
  assert zeroshot != results_key(('synthetic',), 'test', {'eval.tasks': ['retrieval']})


def _metrics():
  return {'eval/synthetic/segmentation_miou': 0.0049, 'eval/synthetic/segmentation_miou_chance': 0.1216,
          'eval/synthetic/ema_segmentation_miou': 0.2, 'eval/synthetic/ema_segmentation_miou_chance': 0.1216,
          'eval/synthetic/linear_probe_top1': 0.5, 'eval/synthetic/linear_probe_chance': 0.25,
          'eval/synthetic/zeroshot_top1': 0.75, 'eval/synthetic/zeroshot_chance': 0.25,
          'eval/synthetic/affinity_consistency': 0.3}


def test_each_score_has_the_chance_level_its_evaluator_reports():
  metrics = _metrics()
  assert chance_level(metrics, 'eval/synthetic/segmentation_miou') == metrics[
      'eval/synthetic/segmentation_miou_chance']
  assert chance_level(metrics, 'eval/synthetic/ema_segmentation_miou') == metrics[
      'eval/synthetic/ema_segmentation_miou_chance']
  assert chance_level(metrics, 'eval/synthetic/linear_probe_top1') == metrics['eval/synthetic/linear_probe_chance']
  assert chance_level(metrics, 'eval/synthetic/affinity_consistency') is None
  # referring expressions: the chance route is the chance of the decoder's and the probe's boxes, not a score
  referring = {'eval/synthetic/referring_probe_acc50': 0.4, 'eval/synthetic/referring_decoder_miou': 0.5,
               'eval/synthetic/referring_chance_acc50': 0.1, 'eval/synthetic/referring_chance_miou': 0.2}
  assert chance_level(referring, 'eval/synthetic/referring_probe_acc50') == 0.1
  assert chance_level(referring, 'eval/synthetic/referring_decoder_miou') == 0.2
  assert [line.split()[0] for line in summary_lines(referring)] == ['eval/synthetic/referring_decoder_miou',
                                                                   'eval/synthetic/referring_probe_acc50']


def test_end_summary_puts_chance_beside_each_score_and_says_where_the_checkpoint_is_and_what_next():
  metrics = _metrics()
  text = end_summary(metrics, 400, 'test', '/runs/clip/checkpoints/400', 572.0, '/runs/clip/curves.png')
  lines = text.splitlines()
  assert lines[0] == 'Finished training at step 400 in 9m32s.'
  miou = next(line for line in lines if 'eval/synthetic/segmentation_miou ' in line)
  assert miou.split()[1:] == [f'{metrics["eval/synthetic/segmentation_miou"]:.4f}', '(chance',
                              f'{metrics["eval/synthetic/segmentation_miou_chance"]:.4f})']
  assert all(line in lines for line in summary_lines(metrics))  # every score, none of the chance entries alone
  assert not any('_chance ' in line for line in lines)
  assert 'Checkpoint: /runs/clip/checkpoints/400' in lines and 'Training curves: /runs/clip/curves.png' in lines
  assert any(line.strip().startswith('python -m vlp_jax.evaluate --checkpoint=/runs/clip/checkpoints/400')
             for line in lines)
  assert any('VLP_CHECKPOINT=/runs/clip/checkpoints/400 jupyter lab notebooks/explore_checkpoint.ipynb' in line
             for line in lines)
  # A run without evaluations still says where its checkpoint is.
  assert 'Checkpoint: /c/1' in end_summary({}, 1, 'test', '/c/1', 3.0).splitlines()
