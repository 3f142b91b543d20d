"""The host memory a run holds outside the devices (data/host_memory.py; issue 61 check d): printed at start with
its parts, and refused with every figure named when it cannot fit."""
import dataclasses
import os

import numpy as np
import pytest

from vlp_jax import hardware
from vlp_jax.data import host_memory
from vlp_jax.data.host_memory import HostMemory
from vlp_jax.errors import ConfigError
from vlp_jax.training.loop import train_and_evaluate

GiB = 2**30


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
  assert host_memory.arrays_bytes(sets) == 10 * 48 * 4 + 10 * 8 + 5 * 12 + 5 * 4


@pytest.mark.slow  # builds a run up to its first step
def test_a_run_that_cannot_hold_its_eval_sets_stops_before_compiling(micro, tmp_path, monkeypatch):
  monkeypatch.setattr(hardware, 'host_memory_bytes', lambda: 1024)
  with pytest.raises(ConfigError, match=r'host memory: the run needs [\d.]+ GiB held outside the devices \(eval sets '
                                        r'[\d.]+ GiB per process\), and this machine has 0.0 GiB'):
    train_and_evaluate(micro, str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run' / 'checkpoints')  # nothing was trained or saved
