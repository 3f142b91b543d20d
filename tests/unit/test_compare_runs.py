"""tools/compare_runs.py: identical workdirs compare equal; a changed metric or parameter is reported."""
import importlib.util
import json
import os
import shutil

import numpy as np
import orbax.checkpoint as ocp

from support import ROOT

_spec = importlib.util.spec_from_file_location('compare_runs', os.path.join(ROOT, 'tools', 'compare_runs.py'))
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)


def _workdir(path, weight, loss):
  os.makedirs(path)
  with open(os.path.join(path, 'metrics.jsonl'), 'w') as f:
    for step in (1, 2):
      f.write(json.dumps({'step': step, 'train/loss': loss * step, 'perf/samples_per_sec': 100.0 * step}) + '\n')
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.join(path, 'checkpoints', '2', 'state'), {'params': {'w': np.asarray(weight, np.float32)}})
  checkpointer.wait_until_finished()
  return str(path)


def test_identical_runs_and_each_kind_of_difference(tmp_path):
  a = _workdir(tmp_path / 'a', [1.0, 2.0], 0.5)
  b = str(tmp_path / 'b')
  shutil.copytree(a, b)
  with open(os.path.join(b, 'metrics.jsonl')) as f:  # timings differ in any two runs: not compared
    lines = [json.loads(line) for line in f]
  with open(os.path.join(b, 'metrics.jsonl'), 'w') as f:
    f.writelines(json.dumps({**r, 'perf/samples_per_sec': 1.0}) + '\n' for r in lines)
  assert compare_runs.main([a, b]) == 0
  assert compare_runs.main([a, _workdir(tmp_path / 'loss', [1.0, 2.0], 0.25)]) == 1
  changed = compare_runs.compare(a, _workdir(tmp_path / 'weight', [1.0, 2.0 + 2**-20], 0.5))
  assert [same for _, same in changed] == [True, True, False, True]
