"""How training batches draw on the data sources (ZeroVL section 3.1 and appendix A.4).

  mixed:         one shuffled order over all examples (sources mix inside every batch, in proportion to their sizes);
                 the default.
  weighted:      sources mix inside every batch, each example's source drawn with the given weights
                 (`config.data.source_weights`, e.g. 'cc3m=1,cc12m=2').
  single_source: debiased sampling. Every global batch comes from one source, drawn with probability proportional to
                 the source's size, or to the given weights.
  sequential:    every global batch comes from one source, and the sources take turns in a fixed order: each epoch
                 walks through all of source 0's batches, then source 1's, and so on. The paper finds that the order
                 matters; it is the order of the sources in the shard list (for the embedded dataset, the order of
                 `config.data.synthetic.sources`).

Each source is an endless stream of its own examples, reshuffled every pass. The n-th batch drawn from a source takes
the n-th run of `global_batch_size` examples from its stream, so within a source no example repeats before all have
been seen (for 'weighted', read "example" for "batch": the unit of a draw is one example). `SourceBatches` maps a
global example index to (source, index in that source's stream). It is a pure
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
from typing import Any, Callable, Sequence

import grain
import numpy as np

from vlp_jax.data.storage import records
from vlp_jax.data.storage.shards import ShardRecords

MODES = ('mixed', 'weighted', 'single_source', 'sequential')
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


def draw_sources(seed: int, batches: np.ndarray, sizes: Sequence[float]) -> np.ndarray:
  """[n] global batch indices -> [n] source index of each batch, drawn with probability proportional to `sizes`
  (source sizes, or weights)."""
  cumulative = np.cumsum(np.asarray(sizes, np.float64))
  picked = np.searchsorted(cumulative / cumulative[-1], batch_uniforms(seed, batches), side='right')
  return np.minimum(picked, len(sizes) - 1)


class SourceBatches(grain.transforms.DatasetSelectionMap):
  """Global example index -> (source, index in that source's endless stream), one source per global batch.

  sizes: examples per source; batch_size: the GLOBAL batch size (1 for 'weighted', whose unit is one example);
  mode: 'weighted', 'single_source' or 'sequential'; weights: the probabilities of the sources (default: sizes).
  Stateless as far as grain can tell: the caches only memoise a deterministic function, and are rebuilt lazily
  after pickling (grain worker processes).
  """

  def __init__(self, sizes: Sequence[int], batch_size: int, mode: str, seed: int,
               weights: Sequence[float] | None = None):
    if mode not in MODES[1:]:
      raise ValueError(f"mixing mode '{mode}' has no per-batch source; valid choices: {list(MODES[1:])}")
    self.sizes, self.batch_size, self.mode, self.seed = tuple(int(n) for n in sizes), batch_size, mode, seed
    self.weights = tuple(float(w) for w in (self.sizes if weights is None else weights))
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
    return draw_sources(self.seed, np.arange(chunk * _CHUNK, (chunk + 1) * _CHUNK), self.weights)


def _shard_source(path: str, strict: bool = True, tries: int = 16) -> str:
  """The one source a shard holds, from its first and last readable records ('' for an empty or unreadable shard).
  strict: a shard whose first and last records name different sources is an error (else the first is returned)."""
  data = grain.sources.ArrayRecordDataSource([path])

  def first_readable(indices) -> str | None:
    for i in indices:
      try:
        return records.deserialize(data[i])['source']
      except records.BadRecordError:  # a bad record at the edge of a shard: look at its neighbour
        continue
    return None

  n = len(data)
  first = first_readable(range(min(tries, n)))
  last = first_readable(range(n - 1, max(-1, n - 1 - tries), -1))
  if first is None or last is None:
    return ''
  if strict and first != last:
    raise ValueError(f"shard {path} mixes sources ('{first}' and '{last}'): single-source, sequential and weighted "
                     'batches need shards that each hold one source; write one set of shards per source')
  return first


def shard_sources(paths: Sequence[str], strict: bool = True, num_threads: int = 16) -> list[str]:
  """The source of each shard (reads two records per shard, in parallel for remote file systems)."""
  with concurrent.futures.ThreadPoolExecutor(max(1, min(num_threads, len(paths)))) as pool:
    return list(pool.map(lambda p: _shard_source(p, strict), paths))


def source_names(sources: Sequence[str]) -> tuple[str, ...]:
  """The per-shard sources -> the distinct source names, in order of first appearance ('' marks an empty shard)."""
  return tuple(dict.fromkeys(s for s in sources if s))


def parse_weights(text: str, names: Sequence[str]) -> list[float]:
  """'cc3m=1,cc12m=2' -> the weight of each of `names`, in order. Every source needs a weight, > 0 in total."""
  weights = {}
  for item in filter(None, (part.strip() for part in text.split(','))):
    name, sep, value = item.partition('=')
    try:
      weights[name.strip()] = float(value)
      assert sep and weights[name.strip()] >= 0
    except (ValueError, AssertionError):
      raise ValueError(f"data.source_weights: '{item}' is not 'source=weight' with a weight >= 0") from None
  unknown, missing = sorted(set(weights) - set(names)), [n for n in names if n not in weights]
  if unknown or missing:
    raise ValueError(f'data.source_weights={text!r} does not match the sources of the data: '
                     + (f'unknown {unknown}; ' if unknown else '') + (f'no weight for {missing}; ' if missing else '')
                     + f'the sources are {list(names)}')
  if not sum(weights.values()) > 0:
    raise ValueError(f'data.source_weights={text!r}: the weights sum to 0')
  return [weights[n] for n in names]


def source_datasets(paths: Sequence[str], sources: Sequence[str], seed: int,
                    shard_records: Callable[[list[str], list[int]], Any] = ShardRecords
                    ) -> tuple[list[str], list[int], list[grain.MapDataset]]:
  """(source names in order of first appearance, their sizes, one endless reshuffled stream per source).

  Stream elements are (shard id, record), the shard id being the shard's index in `paths`; `shard_records` gives
  random access to a list of shards (ShardRecords, or webdataset.TarShardRecords).
  """
  if len(sources) != len(paths):
    raise ValueError(f'got {len(sources)} shard sources for {len(paths)} shards')
  names = list(source_names(sources))
  sizes, streams = [], []
  for k, name in enumerate(names):
    ids = [i for i, s in enumerate(sources) if s == name]
    data = shard_records([paths[i] for i in ids], ids)
    # Each source's shuffle gets its own seed, derived from (seed, k); repeat() reshuffles every pass.
    source_seed = int(np.random.SeedSequence([seed, k]).generate_state(1)[0])
    sizes.append(len(data))
    streams.append(grain.MapDataset.source(data).shuffle(seed=source_seed).repeat())
  return names, sizes, streams


def mixed_sources_dataset(paths: Sequence[str], sources: Sequence[str], *, mode: str, seed: int,
                          global_batch_size: int, weights: str = '',
                          load: Callable[[grain.MapDataset], grain.MapDataset] = lambda stream: stream,
                          shard_records: Callable[[list[str], list[int]], Any] = ShardRecords) -> grain.MapDataset:
  """The examples in the order of `mode` ('weighted', 'single_source' or 'sequential'): an endless MapDataset; for
  the last two, its global batch b (elements [b G, (b + 1) G)) holds examples of one source. Take each process's
  slice after this. load: applied to each source's stream before the selection (decoding, so that a bad record is
  replaced from its own source). weights: `config.data.source_weights`."""
  names, sizes, streams = source_datasets(paths, sources, seed, shard_records)
  if not names:
    raise ValueError('the training shards are empty: no source to draw batches from')
  if mode == 'weighted' and not weights:
    raise ValueError("data.mixing='weighted' needs data.source_weights, e.g. "
                     f"'{','.join(f'{n}=1' for n in names)}'")
  if mode == 'sequential' and weights:
    raise ValueError("data.source_weights does not apply to data.mixing='sequential', which takes every batch of "
                     "each source in turn; use 'single_source' or 'weighted'")
  small = {n: s for n, s in zip(names, sizes) if s < global_batch_size}
  if mode != 'weighted' and small:
    raise ValueError(f"data.mixing='{mode}' fills a global batch of {global_batch_size} from one source, but these "
                     f"sources have fewer examples: {small}; lower batch_size or use data.mixing='mixed'")
  selection = SourceBatches(sizes, 1 if mode == 'weighted' else global_batch_size, mode, seed,
                            parse_weights(weights, names) if weights else None)
  return grain.MapDataset.select_from_datasets([load(s) for s in streams], selection)


class ResampledShards(grain.MapDataset):
  """open_clip's `--dataset-resampled` as an endless random-access stream: shards are drawn uniformly with
  replacement, and each chunk of `draws_per_chunk` consecutive draws is one shuffled pool of all their records (the
  mixing open_clip's shuffle buffer gives, over more shards at once).

  parent: random access to the records of every shard ((shard id, record) elements; ShardRecords or
  webdataset.TarShardRecords) and `ranges`: [(start, end)] of each shard's records in it (empty shards left out).
  Element i depends only on (seed, i): chunk c's draws and its permutation come from SeedSequence([seed, c]), so a
  resumed iterator continues exactly. Chunk starts are computed once in order and kept (a few numbers per chunk).
  """

  def __init__(self, parent: Any, ranges: Sequence[tuple[int, int]], seed: int, draws_per_chunk: int = 16):
    super().__init__()
    self._records = parent
    self._ranges = np.asarray([r for r in ranges if r[1] > r[0]], np.int64).reshape(-1, 2)
    if not len(self._ranges):
      raise ValueError('data.resampled: every shard is empty')
    self._seed, self._draws = seed, draws_per_chunk
    self._init_caches()

  def _init_caches(self) -> None:
    self._starts = [0]  # position of chunk c's first record, for the chunks computed so far
    self._chunk_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    self._lock = threading.Lock()

  def __getstate__(self):
    return {k: v for k, v in self.__dict__.items() if k not in ('_starts', '_chunk_cache', '_lock')}

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._init_caches()

  def __len__(self) -> int:
    return sys.maxsize

  def _chunk(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(drawn shards [draws], the chunk's records in their shuffled order [n], as indices into the parent)."""
    if chunk not in self._chunk_cache:
      rng = np.random.default_rng(np.random.SeedSequence([self._seed, chunk]))
      shards = rng.integers(0, len(self._ranges), self._draws)
      records = np.concatenate([np.arange(*self._ranges[s]) for s in shards])
      if len(self._chunk_cache) > 4:
        self._chunk_cache.pop(next(iter(self._chunk_cache)))
      self._chunk_cache[chunk] = shards, records[rng.permutation(len(records))]
    return self._chunk_cache[chunk]

  def _locate(self, index: int) -> tuple[int, int]:
    """position -> (chunk, offset in it)."""
    with self._lock:
      while self._starts[-1] <= index:
        sizes = self._ranges[:, 1] - self._ranges[:, 0]
        rng = np.random.default_rng(np.random.SeedSequence([self._seed, len(self._starts) - 1]))
        self._starts.append(self._starts[-1] + int(sizes[rng.integers(0, len(self._ranges), self._draws)].sum()))
      chunk = int(np.searchsorted(self._starts, index, side='right')) - 1
      return chunk, index - self._starts[chunk]

  def drawn_shards(self, chunk: int) -> np.ndarray:
    """The shards (indices into `ranges`) drawn for chunk `chunk`."""
    return self._chunk(chunk)[0]

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    chunk, offset = self._locate(int(index))
    with self._lock:
      record = self._chunk(chunk)[1][offset]
    return self._records[int(record)]

  def __str__(self) -> str:
    return f'ResampledShards(shards={len(self._ranges)}, draws_per_chunk={self._draws})'
