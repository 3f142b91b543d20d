"""Device mesh, sharding rules and host-local <-> global arrays.

One mesh with axes ('data', 'fsdp'). The batch is sharded over both axes; parameters are replicated unless they are
large enough to be sharded over 'fsdp' along their largest divisible dimension.
"""
from __future__ import annotations

import datetime
import math
import os
from typing import Any

import jax
import numpy as np
from jax._src import distributed as jax_distributed  # the coordination client: no public accessor
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ('data', 'fsdp')
BATCH_AXES = ('data', 'fsdp')  # the batch dimension is split over every device


def make_mesh(fsdp: int = 1, devices: list | None = None) -> Mesh:
  """Mesh of shape [n_devices // fsdp, fsdp] with Auto axes (GSPMD propagation)."""
  devices = list(jax.devices() if devices is None else devices)
  if fsdp < 1 or len(devices) % fsdp:
    raise ValueError(f'mesh.fsdp={fsdp} must be >= 1 and divide the device count {len(devices)}')
  grid = np.array(devices).reshape(len(devices) // fsdp, fsdp)
  return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto, AxisType.Auto))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) dim split over every device, the rest replicated."""
  return NamedSharding(mesh, P(BATCH_AXES))


# The name under which a scanned transformer (models/transformer.py, model.scan_layers) keeps its blocks' parameters,
# stacked on a leading layer axis.
SCANNED_BLOCKS = 'resblocks'


def stacked_axes(path: tuple) -> int:
  """How many leading stacking axes a parameter at `path` (jax tree-path keys) has: 1 under `SCANNED_BLOCKS`, else 0.
  Rules that read a parameter's shape (FSDP sharding, weight decay) skip them."""
  return int(any(getattr(key, 'key', None) == SCANNED_BLOCKS for key in path))


def param_spec(shape: tuple[int, ...], fsdp_size: int, min_size: int, layer_axes: int = 0) -> P:
  """Shard the largest dim divisible by `fsdp_size` over 'fsdp' for arrays with >= min_size elements. The first
  `layer_axes` dims (the layer axis of scanned blocks, which the scan slices step by step) are never sharded."""
  if fsdp_size <= 1 or math.prod(shape) < min_size:
    return P()
  for dim in sorted(range(layer_axes, len(shape)), key=lambda d: -shape[d]):
    if shape[dim] % fsdp_size == 0:
      spec = [None] * len(shape)
      spec[dim] = 'fsdp'
      return P(*spec)
  return P()


def tree_shardings(tree: Any, mesh: Mesh, min_size: int = 2**18) -> Any:
  """NamedSharding for every array leaf of `tree` (params, optimizer state) by the fsdp rule."""
  fsdp_size = mesh.shape['fsdp']
  return jax.tree_util.tree_map_with_path(lambda path, x: NamedSharding(
      mesh, param_spec(tuple(np.shape(x)), fsdp_size, min_size, stacked_axes(path))), tree)


def constrain_rows(x: jax.Array) -> jax.Array:
  """Shard a [B, ...] matrix by rows over every device, when traced under `jax.set_mesh`.

  Logit and affinity matrices use this so that a device holds B_local x B_global, never B x B.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  return jax.lax.with_sharding_constraint(x, P(BATCH_AXES, *([None] * (x.ndim - 1))))


def global_batch(local: Any, mesh: Mesh) -> Any:
  """Assemble process-local numpy batches ([B_local, ...]) into global arrays sharded by batch."""
  sharding = batch_sharding(mesh)
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local)


def replicated_from_host(tree: Any, mesh: Mesh) -> Any:
  """Put a host pytree (identical on every process) on the mesh, replicated."""
  sharding = replicated(mesh)
  return jax.tree.map(
      lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda idx: np.asarray(x)[idx]), tree)


def sharded_from_host(x: np.ndarray, mesh: Mesh) -> jax.Array:
  """Put a host array that every process holds in full on the mesh, split by rows ([N, ...], N % devices == 0)."""
  return jax.make_array_from_callback(x.shape, batch_sharding(mesh), lambda idx: x[idx])


def to_host(x: Any) -> Any:
  """Fully addressable (replicated) jax arrays -> numpy."""
  return jax.tree.map(lambda a: np.asarray(jax.device_get(a)), x)


def num_batch_shards(mesh: Mesh) -> int:
  return mesh.shape['data'] * mesh.shape['fsdp']


def pad_rows(x: np.ndarray, multiple: int) -> np.ndarray:
  """[N, ...] -> [ceil(N / multiple) * multiple, ...], padding with zeros."""
  pad = (-len(x)) % multiple
  if not pad:
    return x
  return np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])


def initialize_distributed(initialization_timeout_seconds: int = 300, heartbeat_timeout_seconds: int = 100,
                           shutdown_timeout_seconds: int = 300) -> None:
  """Join a multi-process job when the environment describes one; a no-op for a single process.

  - explicit: JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID, as
    `launch/local.py` sets them;
  - SLURM with more than one task (`srun`), or VLP_JAX_DISTRIBUTED=1 (TPU pod slices, `launch/tpu_pod.sh`):
    jax.distributed.initialize() detects the rest.

  The timeouts (config.distributed) are jax's: how long to wait for every process to join, after how long without
  heartbeats a process counts as dead (jax then aborts every process), and how long the exit barrier waits.
  """
  env = os.environ
  timeouts = dict(initialization_timeout=initialization_timeout_seconds,
                  heartbeat_timeout_seconds=heartbeat_timeout_seconds,
                  shutdown_timeout_seconds=shutdown_timeout_seconds)
  if env.get('JAX_COORDINATOR_ADDRESS') and env.get('JAX_NUM_PROCESSES'):
    if int(env['JAX_NUM_PROCESSES']) > 1:
      jax.distributed.initialize(env['JAX_COORDINATOR_ADDRESS'], int(env['JAX_NUM_PROCESSES']),
                                 int(env.get('JAX_PROCESS_ID', '0')), **timeouts)
  elif int(env.get('SLURM_NTASKS', '1')) > 1 or env.get('VLP_JAX_DISTRIBUTED') == '1':
    jax.distributed.initialize(**timeouts)


# When jax gives up on a silent peer (xla's coordination_service.cc and coordination_service_agent.cc): each agent
# sends a heartbeat every heartbeat_timeout / 2, and the service, checking once a second, declares a task dead once
# its last heartbeat is more than heartbeat_timeout old, then aborts every other task. A peer that stops right after
# a heartbeat is declared dead heartbeat_timeout (+1 s) later, one that stops just before its next heartbeat only
# heartbeat_timeout / 2 later. A lost coordinator: the survivors' next heartbeat (within heartbeat_timeout / 2) times
# out after heartbeat_timeout / 2 more, and they abort 1 s after; later than the other case, never earlier.
# Measured: tests/integration/test_jax_heartbeat_abort.py, docs/reliability.md.
HEARTBEATS_PER_TIMEOUT = 2
# What the peer monitor may add to its timeout besides its polls: a key-value round trip and thread wake-ups on a
# loaded host (tests/integration/test_host_faults.py: under 0.3 s at a load average of 9).
PEER_MONITOR_SLACK_SECONDS = 1.0


def jax_abort_earliest_seconds(heartbeat_timeout_seconds: float) -> float:
  """The soonest after a peer stops (SIGSTOP, a frozen host) that jax's coordination service can abort the other
  processes: heartbeat_timeout_seconds / 2 (see HEARTBEATS_PER_TIMEOUT)."""
  return heartbeat_timeout_seconds / HEARTBEATS_PER_TIMEOUT


def peer_poll_seconds(peer_timeout_seconds: float) -> float:
  """How often the peer monitor (training/watchdog.py) writes its heartbeat and reads the peers': a tenth of its
  timeout, within [0.5, 2] s."""
  return max(0.5, min(2.0, peer_timeout_seconds / 10))


def peer_named_latest_seconds(peer_timeout_seconds: float) -> float:
  """The latest after a peer stops that the peer monitor names it: the peer's last write may come up to one poll
  after this process last read, the timeout counts from that read, and the check that fires comes up to one poll
  after it; plus PEER_MONITOR_SLACK_SECONDS."""
  return peer_timeout_seconds + 2 * peer_poll_seconds(peer_timeout_seconds) + PEER_MONITOR_SLACK_SECONDS


def longest_peer_timeout_seconds(heartbeat_timeout_seconds: float) -> int:
  """The longest whole-second peer timeout that the monitor still names a stopped peer within, before jax could
  abort (peer_named_latest_seconds < jax_abort_earliest_seconds); 0 when none does (the monitor off)."""
  timeout = int(jax_abort_earliest_seconds(heartbeat_timeout_seconds))
  while timeout > 0 and peer_named_latest_seconds(timeout) >= jax_abort_earliest_seconds(heartbeat_timeout_seconds):
    timeout -= 1
  return timeout


def coordination_client() -> Any:
  """jax's client of the job's coordination service (its key-value store and barriers); None for one process."""
  return jax_distributed.global_state.client


# The key of the coordination service's store whose writing starts jax's preemption sync protocol: what jax's own
# SIGTERM handler writes (xla's preemption_sync_manager.cc). Writing it ourselves lets SIGINT, and a SIGTERM caught
# by Python (which replaces jax's handler), stop every process at the same step.
PREEMPTION_NOTICE_KEY = 'RECEIVED_PREEMPTION_NOTICE'


def announce_preemption() -> None:
  """Tell every process of the job that this one received a stop signal: each then reaches
  `multihost_utils.reached_preemption_sync_point` at the same step."""
  client = coordination_client()
  if client is not None:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()  # RFC 3339, as the protocol parses it
    client.key_value_set(PREEMPTION_NOTICE_KEY, now, allow_overwrite=True)
