"""How training batches draw on the data sources (ZeroVL section 3.1 and appendix A.4).

  mixed:         one shuffled order over all examples (sources mix inside every batch); the default.
  single_source: debiased sampling. Every global batch comes from one source, drawn with probability proportional to
                 the source's size.
  sequential:    every global batch comes from one source, and the sources take turns in a fixed order: each epoch
                 walks through all of source 0's batches, then source 1's, and so on. The paper finds that the order
                 matters; it is the order of the sources in the shard list (for the embedded dataset, the order of
                 `config.data.synthetic.sources`).

Each source is an endless stream of its own examples, reshuffled every pass. The n-th batch drawn from a source takes
the n-th run of `global_batch_size` examples from its stream, so within a source no example repeats before all have
been seen. `SourceBatches` maps a global example index to (source, index in that source's stream). It is a pure
function of the index: the source of global batch b comes from a counter-based generator keyed by (seed, b), so
every host computes the same draw with no communication, and the iterator resumes exactly from its single index.

Sources are found per shard, from the records themselves: the `source` field of each shard's first and last record
(two reads per shard, not a pass over the data). Shards must therefore hold a single source each, which is how the
embedded dataset and per-dataset converters write them.
"""
from __future__ import annotations

import concurrent.futures
import sys
import threading
from typing import Sequence

import grain
import numpy as np

from vlp_jax.data import records

MODES = ('mixed', 'single_source', 'sequential')
_CHUNK = 4096  # batches whose draws are computed (vectorised) and cached together
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
  """The SplitMix64 output function on uint64 arrays (wrap-around arithmetic)."""
  x = np.asarray(x, np.uint64)
  with np.errstate(over='ignore'):
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def batch_uniforms(seed: int, batches: np.ndarray) -> np.ndarray:
  """[n] batch indices -> [n] float64 uniforms in [0, 1): output b of a SplitMix64 generator keyed by `seed`.

  Counter-based: the value for batch b depends on (seed, b) only, so any host draws it, for any b, without
  replaying the draws before it.
  """
  key = _splitmix64(np.array([seed % 2**64], np.uint64))[0]
  with np.errstate(over='ignore'):
    state = key + (np.asarray(batches, np.uint64) + np.uint64(1)) * _GOLDEN
  return (_splitmix64(state) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def draw_sources(seed: int, batches: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
  """[n] global batch indices -> [n] source index of each batch, drawn with probability proportional to size."""
  cumulative = np.cumsum(np.asarray(sizes, np.float64))
  picked = np.searchsorted(cumulative / cumulative[-1], batch_uniforms(seed, batches), side='right')
  return np.minimum(picked, len(sizes) - 1)


class SourceBatches(grain.transforms.DatasetSelectionMap):
  """Global example index -> (source, index in that source's endless stream), one source per global batch.

  sizes: examples per source; batch_size: the GLOBAL batch size; mode: 'single_source' or 'sequential'.
  Stateless as far as grain can tell: the caches only memoise a deterministic function, and are rebuilt lazily
  after pickling (grain worker processes).
  """

  def __init__(self, sizes: Sequence[int], batch_size: int, mode: str, seed: int):
    if mode not in MODES[1:]:
      raise ValueError(f"mixing mode '{mode}' has no per-batch source; valid choices: {list(MODES[1:])}")
    self.sizes, self.batch_size, self.mode, self.seed = tuple(int(n) for n in sizes), batch_size, mode, seed
    # sequential: batches per source per epoch, and where each source's run starts in the epoch
    self._runs = np.array([n // batch_size for n in self.sizes])
    self._run_starts = np.concatenate([[0], np.cumsum(self._runs)])
    self._init_caches()

  def _init_caches(self) -> None:
    self._lock = threading.Lock()
    self._chunk_starts = [np.zeros(len(self.sizes), np.int64)]  # per chunk: batches each source had before it
    self._chunks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

  def __getstate__(self):
    return {k: v for k, v in self.__dict__.items() if k not in ('_lock', '_chunk_starts', '_chunks')}

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._init_caches()

  def __len__(self) -> int:
    return sys.maxsize

  def __getitem__(self, index: int) -> tuple[int, int]:
    batch, offset = divmod(int(index), self.batch_size)
    source, rank = self.batch_source(batch)
    return source, rank * self.batch_size + offset

  def batch_source(self, batch: int) -> tuple[int, int]:
    """(source of global batch `batch`, how many earlier batches came from that source)."""
    if self.mode == 'sequential':
      epoch, within = divmod(batch, int(self._run_starts[-1]))
      source = int(np.searchsorted(self._run_starts, within, side='right')) - 1
      return source, epoch * int(self._runs[source]) + within - int(self._run_starts[source])
    sources, ranks = self._chunk(batch // _CHUNK)
    return int(sources[batch % _CHUNK]), int(ranks[batch % _CHUNK])

  def _chunk(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """[_CHUNK] sources and ranks of the batches of `chunk` (debiased sampling)."""
    with self._lock:
      if chunk in self._chunks:
        return self._chunks[chunk]
      while len(self._chunk_starts) <= chunk:  # counts before each chunk, extended as far as needed
        sources = self._draw(len(self._chunk_starts) - 1)
        self._chunk_starts.append(self._chunk_starts[-1] + np.bincount(sources, minlength=len(self.sizes)))
      sources = self._draw(chunk)
      one_hot = sources[:, None] == np.arange(len(self.sizes))  # [_CHUNK, S]
      earlier = np.cumsum(one_hot, axis=0) - one_hot  # batches of each source before this one, in the chunk
      ranks = self._chunk_starts[chunk][sources] + earlier[np.arange(_CHUNK), sources]
      if len(self._chunks) >= 4:  # readers move forward; keep only a few recent chunks
        self._chunks.clear()
      self._chunks[chunk] = (sources, ranks)
      return sources, ranks

  def _draw(self, chunk: int) -> np.ndarray:
    return draw_sources(self.seed, np.arange(chunk * _CHUNK, (chunk + 1) * _CHUNK), self.sizes)


def _shard_source(path: str) -> str:
  """The one source a shard holds, from its first and last records."""
  data = grain.sources.ArrayRecordDataSource([path])
  if not len(data):
    return ''
  first, last = (records.deserialize(data[i])['source'] for i in (0, len(data) - 1))
  if first != last:
    raise ValueError(f"shard {path} mixes sources ('{first}' and '{last}'): single-source and sequential batches "
                     "need shards that each hold one source; write one set of shards per source")
  return first


def shard_sources(paths: Sequence[str], num_threads: int = 16) -> list[str]:
  """The source of each shard (reads two records per shard, in parallel for remote file systems)."""
  with concurrent.futures.ThreadPoolExecutor(max(1, min(num_threads, len(paths)))) as pool:
    return list(pool.map(_shard_source, paths))


def source_datasets(paths: Sequence[str], sources: Sequence[str], seed: int
                    ) -> tuple[list[str], list[int], list[grain.MapDataset]]:
  """(source names in order of first appearance, their sizes, one endless reshuffled record stream per source)."""
  if len(sources) != len(paths):
    raise ValueError(f'got {len(sources)} shard sources for {len(paths)} shards')
  names = list(dict.fromkeys(s for s in sources if s))  # '' marks an empty shard
  sizes, streams = [], []
  for k, name in enumerate(names):
    data = grain.sources.ArrayRecordDataSource([p for p, s in zip(paths, sources) if s == name])
    # Each source's shuffle gets its own seed, derived from (seed, k); repeat() reshuffles every pass.
    source_seed = int(np.random.SeedSequence([seed, k]).generate_state(1)[0])
    sizes.append(len(data))
    streams.append(grain.MapDataset.source(data).shuffle(seed=source_seed).repeat())
  return names, sizes, streams


def single_source_dataset(paths: Sequence[str], sources: Sequence[str], *, mode: str, seed: int,
                          global_batch_size: int) -> grain.MapDataset:
  """The records in the order of `mode` ('single_source' or 'sequential'): an endless MapDataset whose global
  batch b (elements [b G, (b + 1) G)) holds records of one source. Take each process's slice after this."""
  names, sizes, streams = source_datasets(paths, sources, seed)
  if not names:
    raise ValueError('the training shards are empty: no source to draw batches from')
  small = {n: s for n, s in zip(names, sizes) if s < global_batch_size}
  if small:
    raise ValueError(f"data.mixing='{mode}' fills a global batch of {global_batch_size} from one source, but these "
                     f"sources have fewer examples: {small}; lower batch_size or use data.mixing='mixed'")
  return grain.MapDataset.select_from_datasets(streams, SourceBatches(sizes, global_batch_size, mode, seed))
