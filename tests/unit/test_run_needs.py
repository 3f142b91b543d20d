"""benchmarks/run_needs.py, the "What a run needs" tables of docs/scaling.md: every shipped full-scale config has its
row, the index bytes per sample are what the webdataset reader builds, and the traced step counts what the towers
predict."""
import glob
import os

import numpy as np
import pytest

from support import ROOT, write_webdataset
from benchmarks import run_needs
from vlp_jax.config import from_file
from vlp_jax.data.loading import teacher_table as teacher
from vlp_jax.data.sources import webdataset_tars as webdataset
from vlp_jax.data.storage import shards


def _shipped_full_scale_configs():
  """configs/*.py that are neither the small-scale ones (*_shapes.py, shapes_base.py) nor experiments."""
  names = [os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'configs', '*.py'))]
  return sorted(n for n in names if not n.endswith('_shapes') and n != 'shapes_base')


def test_every_shipped_full_scale_config_has_its_row_in_the_docs():
  names = _shipped_full_scale_configs()
  assert sorted(run_needs.DATA) == names
  with open(os.path.join(ROOT, 'docs', 'scaling.md'), encoding='utf-8') as f:
    block = f.read().split(run_needs.BEGIN, 1)[1].split(run_needs.END, 1)[0]
  for name in names:
    assert block.count(f'\n| {name} |') == 2, name  # the host table and the compute table


def test_index_bytes_per_sample_are_the_readers_own(tmp_path):
  """samples x 41 bytes: what the webdataset reader's index holds for keys of 9 characters ('web000012')."""
  shards = write_webdataset(str(tmp_path), {'web': 2}, samples_per_shard=6, broken=False)['web']
  indexes = webdataset.index_shards(shards, cache_dir=str(tmp_path / 'cache')).by_path.values()
  samples = sum(len(index.rows) for index in indexes)
  held = sum(index.rows.nbytes + index.keys.nbytes for index in indexes)
  config = from_file(os.path.join(ROOT, 'configs', 'siglip2_webli.py'))
  assert run_needs.index_bytes(config, run_needs.Data(samples, 2, 'test')) == held == samples * 41
  clip = from_file(os.path.join(ROOT, 'configs', 'clip_cc3m.py'))  # ArrayRecord: no index in memory
  assert run_needs.index_bytes(clip, run_needs.Data(samples, 2, 'test')) == 0


def test_the_teacher_bytes_are_what_saco_maps(tmp_path):
  """One count per fact (issue 61 check f): the table's teacher bytes (data/loading/host_memory.py's) against the files
  data/loading/teacher_table.py writes and maps: embeddings, sorted keys and row numbers."""
  keys = np.array([f'{i:09d}' for i in range(300)])  # 9-character keys, as KEY_BYTES
  np.savez(tmp_path / 'teacher.npz', keys=keys, image_embeddings=np.ones((300, run_needs.TEACHER_DIM), np.float32))
  mapped = teacher.table_bytes(teacher.prepare_table(str(tmp_path / 'teacher.npz'), str(tmp_path / 'cache')))
  saco = from_file(os.path.join(ROOT, 'configs', 'saco_cc3m.py'))
  assert run_needs.teacher_bytes(saco, run_needs.Data(300, 1, 'test')) == mapped == 300 * (512 * 4 + 9 + 8)


def test_open_files_are_bounded_per_reader_not_by_the_shards_read():
  # data/storage/shards.py: each reader keeps at most open_shards_budget files; one reader per worker, per source
  # outside 'mixed' batches, and never more than the shards. 143c8f2's table counted every shard x every worker (1.6M
  # for siglip2_webli).
  webli = from_file(os.path.join(ROOT, 'configs', 'siglip2_webli.py'))
  assert shards.open_shards_budget(run_needs.OPEN_FILES_LIMIT) == shards.MAX_OPEN_SHARDS == 1024
  assert shards.open_shards_budget(1024) == shards.MIN_OPEN_SHARDS == 32
  assert run_needs.open_files(webli, run_needs.DATA['siglip2_webli']) == (1024 * 16, 1024)  # 100k shards
  zerovl = from_file(os.path.join(ROOT, 'configs', 'zerovl_multisource.py'))  # single_source: a reader per source
  assert zerovl.data.mixing == 'single_source' and run_needs.DATA['zerovl_multisource'].sources == 4
  assert run_needs.open_files(zerovl, run_needs.Data(10**8, 40_000, 'test', sources=4)) == (4 * 1024 * 16, 4 * 1024)
  assert run_needs.open_files(zerovl, run_needs.DATA['zerovl_multisource']) == (1423 * 16, 1423)  # all its shards
  clip = from_file(os.path.join(ROOT, 'configs', 'clip_continue.py'))  # 60 shards: fewer than the bound
  assert run_needs.open_files(clip, run_needs.DATA['clip_continue']) == (60 * clip.data.num_workers, 60)


def test_the_markers_block_is_replaced_and_the_rest_kept(tmp_path):
  path = tmp_path / 'doc.md'
  path.write_text(f'before\n{run_needs.BEGIN}\nold table\n{run_needs.END}\nafter\n')
  run_needs.write_between_markers(str(path), 'new table')
  assert path.read_text() == f'before\n{run_needs.BEGIN}\nnew table\n{run_needs.END}\nafter\n'


@pytest.mark.slow  # traces and lowers ViT-B/32 CLIP's train step at batch 2048 (about 25 s here)
def test_a_clip_step_is_its_two_towers_forward_and_backward_and_xla_counts_the_same():
  """For plain CLIP the traced step holds nothing but the image-text pair: 3 x (image + text forward) x batch, to
  within the logit matrix and the last block's pooled rows. XLA's cost analysis of the same step lowered for the CPU
  (an independent count, elementwise work included) agrees with the jaxpr's."""
  row = run_needs.needs('clip_continue')
  assert row['step_flops'] == pytest.approx(row['pair_flops'], rel=0.02)
  assert row['early_step_flops'] == row['step_flops']  # no phase starts late
  assert row['image_flops'] > row['text_flops'] > 0
  assert row['evaluations'] == 1 and row['probe'] == 0 and row['teacher'] == 0
  config = run_needs.with_tokenizer(from_file(os.path.join(ROOT, 'configs', 'clip_continue.py')))
  xla = run_needs.traced_step(config).lower().cost_analysis()['flops']
  assert xla == pytest.approx(row['step_flops'], rel=0.02)
