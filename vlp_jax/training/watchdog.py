"""What ends a run that cannot go on, fast and with a named exit code (vlp_jax/errors.py, docs/reliability.md):

- `StepWatchdog` (a loop hook and a thread): no step finished in time (config.watchdog) -> the stack of every thread
  to stderr, a line naming the step waited on (and, with several processes, where each peer was), exit 77.
- `PeerMonitor` (a thread, several processes only): every process writes a heartbeat of its own into the job's
  coordination store; a peer silent for config.watchdog.peer_timeout_seconds is lost -> one line naming it, exit 76.
  It runs below jax's heartbeat timeout, which would otherwise abort every process (SIGABRT) without saying more.
- A collective that fails because a peer went away (a reset connection, an unreachable coordination service) ends
  the process the same way, exit 76, naming the peer whose heartbeat stopped when that shows within two polls.

Each exits with `os._exit` after flushing: the main thread may be the one that hangs (a thread's sys.exit ends only
that thread), and a normal exit would wait in jax's shutdown barrier for the lost peer (config.distributed).
"""
from __future__ import annotations

import faulthandler
import math
import os
import re
import sys
import threading
import time
from typing import Any, Callable

import jax
import ml_collections

from vlp_jax import errors, parallel

ALIVE_DIRECTORY = 'vlp_jax/alive/'  # one key per process in the coordination store: '<beat> <last step done>'
DONE = 'done'  # the heartbeat of a process that left the loop normally: never counted as lost

# What a collective, a barrier or the coordination client says when a peer process has gone (gloo on CPU, grpc to the
# coordination service, orbax's barriers). A crash of this process says none of these.
PEER_FAILURE = re.compile(r'gloo|connection (reset|closed|refused)|broken pipe|socket closed|unavailable|'
                          r'deadline.?exceeded|heartbeat|coordination.?service|barrier|peer', re.IGNORECASE)


def exit_now(code: int, message: str) -> None:
  """Print `message` on stderr, flush both streams and end the process with `code` at once (see the module doc)."""
  print(message, file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(code)


def evaluates_or_saves(config: ml_collections.ConfigDict, step: int, last_step: int) -> bool:
  """Whether the loop's hooks evaluate or checkpoint after `step` (training/hooks.py's schedule)."""
  return (step % config.eval.every_steps == 0 or step == config.total_steps
          or step % config.checkpoint.every_steps == 0 or step == last_step)


def step_allowance(config: ml_collections.ConfigDict, step: int, start_step: int, last_step: int) -> float:
  """Seconds that `step` (its dispatch and its hooks) may take: step_timeout_seconds, plus first_step_seconds for the
  first step of the run (it compiles), plus eval_seconds when it evaluates or checkpoints; inf when off."""
  watch = config.watchdog
  if not watch.step_timeout_seconds:
    return math.inf
  return (watch.step_timeout_seconds + (watch.first_step_seconds if step == start_step + 1 else 0)
          + (watch.eval_seconds if evaluates_or_saves(config, step, last_step) else 0))


def is_peer_failure(error: BaseException) -> bool:
  """Whether `error`, or an error it was raised from, is a collective or coordination failure (PEER_FAILURE)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, (jax.errors.JaxRuntimeError, ConnectionError, TimeoutError)) and \
        PEER_FAILURE.search(str(error)):
      return True
    error = error.__cause__ or error.__context__
  return False


class PeerTable:
  """When each peer's heartbeat last changed, by this process's clock (clocks of other hosts are never compared)."""

  def __init__(self, peers: list[int], now: float, grace: float = 0.0):
    """`grace`: how much longer a peer not heard from yet may stay silent (it may still be compiling)."""
    self.changed = {peer: now + grace for peer in peers}
    self.values: dict[int, str] = {}

  def update(self, values: dict[int, str], now: float) -> None:
    """`values`: {process index: its heartbeat '<beat> <last step>' or DONE}, as read from the store."""
    for peer, value in values.items():
      if peer in self.changed and value != self.values.get(peer):
        self.values[peer], self.changed[peer] = value, now

  def silent(self, now: float, timeout: float) -> list[int]:
    """The peers whose heartbeat has not changed for `timeout` seconds and that did not leave normally."""
    return [peer for peer, changed in sorted(self.changed.items())
            if now - changed >= timeout and self.values.get(peer) != DONE]

  def silent_since(self, moment: float) -> list[int]:
    """The peers not heard from since `moment` (and that did not leave normally)."""
    return [peer for peer, changed in sorted(self.changed.items())
            if changed < moment and self.values.get(peer) != DONE]

  def last_step(self, peer: int) -> str:
    """The last step `peer` reported done, '?' before its first heartbeat."""
    value = self.values.get(peer, '')
    return value.split()[-1] if len(value.split()) == 2 else '?'


class PeerMonitor:
  """A daemon thread: every `poll` seconds, writes this process's heartbeat and reads every peer's; exits 76 when a
  peer is silent for `timeout` seconds or the coordination service cannot be reached."""

  def __init__(self, client: Any, process_index: int, process_count: int, timeout: float,
               last_step: Callable[[], int], grace: float = 0.0, clock: Callable[[], float] = time.monotonic):
    self.client, self.index, self.timeout, self.last_step, self.clock = (client, process_index, timeout, last_step,
                                                                         clock)
    self.poll = max(0.5, min(2.0, timeout / 10))
    # Peers start beating when they enter the loop, after compiling, which takes longer on some: `grace` more for
    # the first beat.
    self.table = PeerTable([p for p in range(process_count) if p != process_index], clock(), grace)
    self.stopped = threading.Event()
    self.thread = threading.Thread(target=self._run, name='vlp_jax-peer-monitor', daemon=True)
    self.beat = 0

  def start(self) -> 'PeerMonitor':
    self.exchange()  # a first heartbeat now: the peers' grace for this process ends before its first step
    self.thread.start()
    return self

  def stop(self) -> None:
    """Stop beating and say so: the peers will not count this process as lost while it finishes."""
    self.stopped.set()
    self.thread.join(timeout=2 * self.poll + 5)
    try:
      self.client.key_value_set(ALIVE_DIRECTORY + str(self.index), DONE, allow_overwrite=True)
    except Exception:  # pylint: disable=broad-except  # the service is gone: nobody is left to tell
      pass

  def exchange(self) -> None:
    """Write this process's heartbeat, read the peers' into the table."""
    self.beat += 1
    self.client.key_value_set(ALIVE_DIRECTORY + str(self.index), f'{self.beat} {self.last_step()}',
                              allow_overwrite=True)
    values = {int(key.rstrip('/').rsplit('/', 1)[-1]): value
              for key, value in self.client.key_value_dir_get(ALIVE_DIRECTORY)}
    self.table.update(values, self.clock())

  def _run(self) -> None:
    while not self.stopped.wait(self.poll):
      try:
        self.exchange()
      except Exception as error:  # pylint: disable=broad-except
        if self.stopped.is_set():
          return
        exit_now(errors.EXIT_PEER_LOST, f'lost the coordinator (process 0): the coordination service cannot be '
                 f'reached ({first_line(error)}); stopping (exit {errors.EXIT_PEER_LOST}, retryable).')
      lost = self.table.silent(self.clock(), self.timeout)
      if lost and not self.stopped.is_set():
        exit_now(errors.EXIT_PEER_LOST, f'lost {describe(lost, self.table)}: no heartbeat for {self.timeout:g} s '
                 f'(config.watchdog.peer_timeout_seconds); stopping (exit {errors.EXIT_PEER_LOST}, retryable).')

  def silent_peers(self) -> list[int]:
    """The peers whose heartbeat does not move over two polls, after one more to read what was already written
    (after a collective failed)."""
    time.sleep(self.poll + 0.1)
    moment = self.clock()
    time.sleep(2 * self.poll + 0.1)
    return self.table.silent_since(moment)


def first_line(error: BaseException) -> str:
  return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def describe(peers: list[int], table: PeerTable) -> str:
  """'process 1 (last step done: 24)', for each of `peers`."""
  return ', '.join(f'process {p} (last step done: {table.last_step(p)})' for p in peers)


class StepWatchdog:
  """Enter around the training loop and add as the last hook (training/loop.py). A daemon thread checks that every
  step finishes (is dispatched and through its hooks) within `step_allowance`; otherwise dumps every thread's stack
  and exits 77. With several processes it also runs the PeerMonitor, and on leaving with a collective failure exits
  76 (see the module doc)."""

  def __init__(self, config: ml_collections.ConfigDict, start_step: int, last_step: int,
               clock: Callable[[], float] = time.monotonic):
    self.config, self.start_step, self.last_step, self.clock = config, start_step, last_step, clock
    self.done = start_step  # the last step through its hooks
    self.waiting_for, self.allowed, self.deadline = start_step + 1, math.inf, math.inf
    self.stopped = threading.Event()
    self.thread = threading.Thread(target=self._run, name='vlp_jax-step-watchdog', daemon=True)
    self.monitor = None

  def expect(self, step: int) -> None:
    """Start the clock of `step`."""
    self.waiting_for = step
    self.allowed = step_allowance(self.config, step, self.start_step, self.last_step)
    self.deadline = self.clock() + self.allowed

  def after_step(self, ctx: Any, step: int, metrics: dict[str, Any]) -> None:
    del ctx, metrics
    self.done = step
    self.expect(step + 1)

  def overdue(self) -> bool:
    return self.clock() > self.deadline

  def __enter__(self) -> 'StepWatchdog':
    self.expect(self.start_step + 1)
    if self.allowed < math.inf:
      self.thread.start()
    peer_timeout = self.config.watchdog.peer_timeout_seconds
    if jax.process_count() > 1 and peer_timeout and parallel.coordination_client() is not None:
      self.monitor = PeerMonitor(parallel.coordination_client(), jax.process_index(), jax.process_count(),
                                 peer_timeout, lambda: self.done, self.config.watchdog.first_step_seconds).start()
    return self

  def __exit__(self, exc_type, error, traceback) -> None:
    if error is not None and jax.process_count() > 1 and is_peer_failure(error):
      lost = self.monitor.silent_peers() if self.monitor else []
      who = describe(lost, self.monitor.table) if lost else 'a peer process (which one: see their logs)'
      exit_now(errors.EXIT_PEER_LOST, f'lost {who}: step {self.waiting_for} failed in a collective '
               f'({first_line(error)}); stopping (exit {errors.EXIT_PEER_LOST}, retryable).')
    self.stopped.set()
    if self.monitor:
      self.monitor.stop()

  def _run(self) -> None:
    while not self.stopped.wait(min(1.0, self.allowed / 20)):
      if self.overdue() and not self.stopped.is_set():
        self.fire()

  def fire(self) -> None:
    """Every thread's stack, the step waited on, the peers' last steps; exit 77."""
    print(f'watchdog: step {self.waiting_for} has not finished after {self.allowed:g} s (config.watchdog; the '
          f'last step done is {self.done}). The stack of every thread of process {jax.process_index()}:',
          file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    peers = (f' Peers: {describe(sorted(self.monitor.table.changed), self.monitor.table)}.' if self.monitor
             else '')
    exit_now(errors.EXIT_HUNG, f'watchdog: step {self.waiting_for} hung; stopping (exit {errors.EXIT_HUNG}, '
             f'retryable).{peers}')
