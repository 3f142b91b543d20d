"""The host memory a run holds outside the devices (data/loading/host_memory.py; issue 61 check d): printed at start
with its parts, and refused with every figure named when it cannot fit."""
import dataclasses
import os

import numpy as np
import pytest

from vlp_jax import evalsets, hardware
from vlp_jax.data.loading import host_memory
from vlp_jax.data.loading.host_memory import HostMemory
from vlp_jax.errors import EXIT_CONFIG, ConfigError, exit_code
from vlp_jax.evalsets import budget
from vlp_jax.training import loop
from vlp_jax.training.loop import train_and_evaluate

GiB = 2**30


def arrays_bytes(objects) -> int:
  """What the estimate is checked against: bytes of the numpy arrays among the fields of `objects` (dataclasses,
  such as evaluation sets) as they sit in memory; memory-mapped or streamed fields count nothing."""
  total = 0
  for obj in objects:
    for field in dataclasses.fields(obj):
      value = getattr(obj, field.name)
      if isinstance(value, np.ndarray) and not isinstance(value, np.memmap):
        total += value.nbytes
  return total


def test_shared_parts_count_once_per_host_and_the_others_per_process():
  memory = HostMemory({'webdataset index': 10 * GiB, 'teacher table': 6 * GiB}, {'eval sets': 2 * GiB})
  assert memory.total() == 18 * GiB
  assert memory.total(processes_per_host=4) == 16 * GiB + 4 * 2 * GiB
  assert memory.describe() == ('18.0 GiB held outside the devices (webdataset index 10.0 GiB, mapped once per host; '
                               'teacher table 6.0 GiB, mapped once per host; eval sets 2.0 GiB per process)')


def test_what_cannot_fit_is_refused_naming_every_figure():
  # siglip2_webli at real size: 100k tars of 10k samples, 40 bytes of index each (40 GB), and eval sets held in
  # every process
  memory = HostMemory({'webdataset index': 100_000 * 10_000 * 40}, {'eval sets': 20 * GiB})
  assert host_memory.check(memory, host_total=400 * GiB).startswith('57.3 GiB held outside the devices')
  assert host_memory.shortfall(memory, host_total=400 * GiB) is None
  with pytest.raises(ConfigError, match=r'host memory: the run needs 57.3 GiB held outside the devices \(webdataset '
                                        r'index 37.3 GiB, mapped once per host; eval sets 20.0 GiB per process\), '
                                        r'and this machine has 48.0 GiB. .*config.data.eval_max_examples'):
    host_memory.check(memory, host_total=48 * GiB)
  assert 'by 8 processes' in host_memory.shortfall(memory, host_total=100 * GiB, processes_per_host=8)


def test_arrays_are_counted_by_their_bytes_and_mapped_ones_not(tmp_path):
  @dataclasses.dataclass
  class Held:
    images: np.ndarray
    labels: np.ndarray
    name: str
    mapped: np.ndarray | None = None

  np.save(tmp_path / 'm.npy', np.zeros(1000, np.float32))
  sets = [Held(np.zeros((10, 4, 4, 3), np.float32), np.zeros(10, np.int64), 'a'),
          Held(np.zeros((5, 2, 2, 3), np.uint8), np.zeros(5, np.int32), 'b', np.load(tmp_path / 'm.npy', mmap_mode='r'))]
  assert arrays_bytes(sets) == 10 * 48 * 4 + 10 * 8 + 5 * 12 + 5 * 4


@pytest.mark.slow  # builds the run's data (the embedded dataset) before it stops
def test_a_run_that_cannot_hold_its_eval_sets_stops_before_they_load_or_the_step_compiles(micro, tmp_path,
                                                                                           monkeypatch):
  # Issue 61 check d: the figure comes from the config (evalsets/budget.py), so a run that cannot hold its eval sets
  # stops before decoding them; 143c8f2 measured them after loading, and could die loading them.
  monkeypatch.setattr(hardware, 'host_memory_bytes', lambda: 1024)
  monkeypatch.setattr(loop.evalsets, 'load_eval_sets', lambda *a: pytest.fail('decoded the eval sets first'))
  monkeypatch.setattr(loop.Experiment, 'compiled_step', lambda *a, **k: pytest.fail('compiled the step first'))
  with pytest.raises(ConfigError, match=r'host memory: the run needs [\d.]+ GiB held outside the devices \(eval sets '
                                        r'[\d.]+ GiB per process\), and this machine has 0.0 GiB') as caught:
    train_and_evaluate(micro, str(tmp_path / 'run'))
  assert exit_code(caught.value) == EXIT_CONFIG
  assert not os.path.exists(tmp_path / 'run' / 'checkpoints')  # nothing was trained or saved


def test_the_figure_printed_at_start_is_what_the_eval_sets_hold_once_loaded(micro):
  """The estimate (images as [S, S, 3] float32) against every array the loaded sets hold. Tolerance: besides its
  pixels, each embedded example holds a segmentation mask (S*S uint8), a label and a caption index (int64), which
  the estimate leaves out: at most S*S + 16 bytes per example, 1/12 of the pixels' bytes plus 16 B (at 224 px, where
  only the embedded set has masks: under 0.01% elsewhere)."""
  micro.eval.datasets = ('synthetic', 'synthetic_long')
  micro.eval.tasks = ('zeroshot', 'retrieval', 'linear_probe')
  size = micro.model.vision.image_size
  estimate = budget.host_memory(micro, {'webdataset index': 1000}).per_process['eval sets']
  loaded = evalsets.load_eval_sets(micro)
  measured = arrays_bytes(loaded)
  examples = sum(len(s.images) + (0 if s.train_images is None else len(s.train_images)) for s in loaded)
  assert estimate == examples * size * size * 3 * 4  # every image, eval and probe, counted once
  assert estimate <= measured <= estimate + examples * (size * size + 16)
  micro.eval.datasets = ('synthetic', 'digits')  # no published size: named, not guessed
  memory = budget.host_memory(micro, {})
  assert memory.not_counted == ('digits',) and 'digits: size unknown before loading, not counted' in memory.describe()

