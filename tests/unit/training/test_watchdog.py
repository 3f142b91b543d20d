"""The step watchdog, the peer monitor and the lost-peer exit (training/watchdog.py), the multi-process signal path
(guards.PreemptionWatcher), their config checks and the launchers' supervision, without starting a job: fake clocks,
a fake coordination store, and `exit_now` recorded instead of ending the test."""
import importlib.util
import math
import os
import signal
import subprocess
import threading
import time

import jax
import ml_collections
import pytest

from support import ROOT, micro_config
from vlp_jax import config as config_lib
from vlp_jax.cli import evaluate_command
from vlp_jax import errors, parallel
from vlp_jax.training import guards, watchdog

_spec = importlib.util.spec_from_file_location('local_launcher', os.path.join(ROOT, 'launch', 'local.py'))
local = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(local)


def _config(step=10.0, first=100.0, evaluation=50.0, peer=5.0):
  return ml_collections.ConfigDict({
      'total_steps': 20, 'eval': {'every_steps': 10}, 'checkpoint': {'every_steps': 4},
      'watchdog': {'step_timeout_seconds': step, 'first_step_seconds': first, 'eval_seconds': evaluation,
                   'peer_timeout_seconds': peer}})


class _Exits:
  """Stands in for `watchdog.exit_now`: records (code, message) and wakes waiters."""

  def __init__(self):
    self.calls, self.event = [], threading.Event()

  def __call__(self, code, message):
    self.calls.append((code, message))
    self.event.set()


@pytest.fixture
def exits(monkeypatch):
  recorded = _Exits()
  monkeypatch.setattr(watchdog, 'exit_now', recorded)
  return recorded


def test_step_allowance_adds_compilation_and_evaluation_time():
  config = _config()
  assert watchdog.step_allowance(config, 3, start_step=2, last_step=20) == 10 + 100  # the run's first step
  assert watchdog.step_allowance(config, 5, start_step=2, last_step=20) == 10
  assert watchdog.step_allowance(config, 8, start_step=2, last_step=20) == 10 + 50  # checkpoints
  assert watchdog.step_allowance(config, 10, start_step=2, last_step=20) == 10 + 50  # evaluates
  assert watchdog.step_allowance(config, 7, start_step=2, last_step=7) == 10 + 50  # stop_at_step saves
  assert watchdog.step_allowance(_config(step=0), 5, start_step=2, last_step=20) == math.inf  # off


def test_the_watchdog_is_overdue_only_past_the_allowance_of_the_step_it_waits_for():
  now = [0.0]
  dog = watchdog.StepWatchdog(_config(), start_step=0, last_step=20, clock=lambda: now[0])
  dog.expect(1)
  now[0] = 109.0
  assert not dog.overdue()  # the first step may compile
  dog.after_step(None, 1, {})
  assert (dog.done, dog.waiting_for) == (1, 2)
  now[0] = 119.5
  assert dog.overdue() and dog.allowed == 10


def test_a_step_that_hangs_dumps_every_stack_names_the_step_and_exits_77(exits, capfd):
  dog = watchdog.StepWatchdog(_config(step=0.3, first=0.0), start_step=4, last_step=20)
  with dog:
    dog.after_step(None, 5, {})
    assert exits.event.wait(10), 'the watchdog did not fire'
  code, message = exits.calls[0]
  err = capfd.readouterr().err
  assert code == errors.EXIT_HUNG and 'step 6 hung' in message
  assert 'step 6 has not finished after 0.3 s' in err and 'the last step done is 5' in err
  assert 'test_a_step_that_hangs_dumps_every_stack' in err  # the main thread's stack, from faulthandler


def test_a_finished_loop_stops_the_watchdog(exits):
  with watchdog.StepWatchdog(_config(step=0.2, first=0.0), start_step=0, last_step=20):
    pass
  time.sleep(0.5)
  assert not exits.calls


def test_peer_failures_are_told_from_other_errors():
  reset = jax.errors.JaxRuntimeError('INTERNAL: gloo: Connection reset by peer [127.0.0.1]:4242')
  assert watchdog.is_peer_failure(reset)
  try:
    try:
      raise reset
    except jax.errors.JaxRuntimeError as error:
      raise RuntimeError('orbax could not save') from error
  except RuntimeError as wrapped:
    assert watchdog.is_peer_failure(wrapped)  # through the chain
  assert not watchdog.is_peer_failure(jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: out of memory'))
  assert not watchdog.is_peer_failure(ValueError('gloo'))  # not a runtime error


def test_the_peer_table_counts_a_peer_lost_once_its_heartbeat_stops_moving():
  table = watchdog.PeerTable([0, 2], now=0.0)
  table.update({0: '1 4', 1: '1 4', 2: '1 4'}, now=1.0)  # process 1 is this one: not a peer
  table.update({0: '2 5', 2: '1 4'}, now=6.0)
  assert table.silent(now=6.5, timeout=5) == [2] and table.last_step(2) == '4'
  assert table.silent_since(2.0) == [2]
  table.update({2: watchdog.DONE}, now=7.0)  # left the loop normally
  assert table.silent(now=100.0, timeout=5) == [0]
  assert watchdog.PeerTable([3], now=0.0).last_step(3) == '?'


class _Store:
  """The coordination service's key-value store, shared by fake clients; `fail` makes it unreachable."""

  def __init__(self):
    self.values, self.fail = {}, False

  def key_value_set(self, key, value, allow_overwrite=False):
    if self.fail:
      raise jax.errors.JaxRuntimeError('UNAVAILABLE: Failed to send RPC to coordination service')
    self.values[key] = value

  def key_value_dir_get(self, directory):
    return [(key, value) for key, value in self.values.items() if key.startswith(directory)]


def test_the_peer_monitor_names_a_silent_peer_and_exits_76(exits):
  store = _Store()
  alive = watchdog.PeerMonitor(store, 0, 2, timeout=1.0, last_step=lambda: 7)
  other = watchdog.PeerMonitor(store, 1, 2, timeout=1.0, last_step=lambda: 6)
  alive.start(), other.start()
  time.sleep(1.5)
  assert not exits.calls  # both beat
  other.stopped.set()  # process 1 stops beating without saying it is done: killed, or SIGSTOPped
  assert exits.event.wait(10)
  alive.stopped.set()
  code, message = exits.calls[0]
  assert code == errors.EXIT_PEER_LOST and 'lost process 1 (last step done: 6)' in message


def test_a_peer_that_finished_is_not_lost_and_an_unreachable_coordinator_is(exits):
  store = _Store()
  watcher = watchdog.PeerMonitor(store, 1, 2, timeout=1.0, last_step=lambda: 3).start()
  done = watchdog.PeerMonitor(store, 0, 2, timeout=1.0, last_step=lambda: 3).start()
  time.sleep(0.7)
  done.stop()
  time.sleep(2.0)
  assert not exits.calls
  store.fail = True
  assert exits.event.wait(10)
  watcher.stopped.set()
  assert exits.calls[0][0] == errors.EXIT_PEER_LOST and 'lost the coordinator (process 0)' in exits.calls[0][1]


@pytest.mark.slow
def test_leaving_the_loop_on_a_collective_failure_exits_76_naming_the_silent_peer(exits, monkeypatch):
  store = _Store()
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(jax, 'process_index', lambda: 0)
  monkeypatch.setattr(parallel, 'coordination_client', lambda: store)
  peer = watchdog.PeerMonitor(store, 1, 2, timeout=10.0, last_step=lambda: 8).start()
  dog = watchdog.StepWatchdog(_config(step=0, peer=10.0), start_step=8, last_step=20)
  with pytest.raises(jax.errors.JaxRuntimeError), dog:  # the recorded exit_now returns
    time.sleep(2.5)  # two heartbeats of each
    peer.stopped.set()  # then process 1 dies
    raise jax.errors.JaxRuntimeError('INTERNAL: Gloo AllReduce failed: Connection closed by peer')
  code, message = exits.calls[0]
  assert code == errors.EXIT_PEER_LOST and 'lost process 1 (last step done: 8): step 9 failed' in message


def test_other_errors_leave_the_loop_as_they_are(exits, monkeypatch):
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  with pytest.raises(errors.NonFiniteError):
    with watchdog.StepWatchdog(_config(step=0, peer=0), start_step=0, last_step=20):
      raise errors.NonFiniteError('nan')
  assert not exits.calls


def test_with_several_processes_sigint_is_announced_to_all_and_a_second_signal_kills(monkeypatch):
  announced, killed = [], []
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(parallel, 'announce_preemption', lambda: announced.append(True))
  monkeypatch.setattr(guards.os, 'kill', lambda pid, signum: killed.append((signum, signal.getsignal(signum))))
  before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started in the background
  with guards.PreemptionWatcher() as watcher:
    signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: the coordinated stop
    assert watcher.signal_name == 'SIGINT' and announced == [True]
    signal.raise_signal(signal.SIGTERM)  # the second signal: its default action, at once
    assert killed == [(signal.SIGTERM, signal.SIG_DFL)] and announced == [True]
  assert signal.getsignal(signal.SIGINT) is before  # restored


def test_a_process_stopped_by_a_peer_says_so(monkeypatch, capsys):
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(guards.multihost_utils, 'reached_preemption_sync_point', lambda step: step == 3)
  watcher = guards.PreemptionWatcher()
  assert [watcher.should_stop(s) for s in (2, 3)] == [False, True]
  assert 'Another process received a stop signal: stopping after step 3' in capsys.readouterr().out
  assert 'another process received a stop signal: stopped after step 3' in str(errors.Preempted(3, None, '/c/3'))


def test_the_timeouts_are_checked(data_cache):
  config = micro_config(data_cache)
  config_lib.validate(config)
  config.watchdog.peer_timeout_seconds = config.distributed.heartbeat_timeout_seconds
  with pytest.raises(errors.ConfigError, match='peer_timeout_seconds=.*heartbeat_timeout_seconds'):
    config_lib.validate(config)
  config = micro_config(data_cache)
  config.distributed.shutdown_timeout_seconds = 0
  with pytest.raises(errors.ConfigError, match='config.distributed.shutdown_timeout_seconds must be'):
    config_lib.validate(config)


def _simulated_naming_seconds(timeout, stop, phase, read_phase):
  """A naive replay of the peer monitor on one survivor: the peer writes a new heartbeat every poll from `phase` and
  stops at `stop`; the survivor reads every poll from `read_phase` and checks after each read. -> seconds from the
  stop until the survivor names the peer."""
  poll = parallel.peer_poll_seconds(timeout)
  table = watchdog.PeerTable([1], now=0.0)
  now = read_phase
  while True:
    writes = int((min(now, stop) - phase) // poll) + 1 if min(now, stop) >= phase else 0
    table.update({1: f'{writes} 0'}, now)
    if now > stop and table.silent(now, timeout):
      return now - stop
    now += poll


def _simulated_jax_abort_seconds(heartbeat_timeout, stop, check_phase):
  """A naive replay of jax's coordination service: the peer's agent sends a heartbeat every heartbeat_timeout / 2
  from 0 until it stops at `stop`; the service checks every second from `check_phase` for a heartbeat older than the
  timeout. -> seconds from the stop until the service declares the peer dead."""
  interval = heartbeat_timeout / 2
  last_beat = (stop // interval) * interval
  check = check_phase
  while not check - last_beat > heartbeat_timeout:
    check += 1.0
  return check - stop


def test_the_lost_peer_bounds_hold_against_a_replay_of_both_detectors():
  """The peer monitor names a stopped peer within parallel.peer_named_latest_seconds, for any phase of its writes
  and reads against the stop; jax cannot abort earlier than parallel.jax_abort_earliest_seconds, and gets within a
  check interval of it."""
  beyond_one_poll = []
  for timeout in (6, 15, 45):
    poll = parallel.peer_poll_seconds(timeout)
    worst = max(_simulated_naming_seconds(timeout, stop=100.0 + s * poll / 7, phase=p * poll / 5,
                                          read_phase=r * poll / 5)
                for s in range(7) for p in range(5) for r in range(5))
    assert timeout <= worst <= parallel.peer_named_latest_seconds(timeout) - parallel.PEER_MONITOR_SLACK_SECONDS
    beyond_one_poll.append(worst > timeout + poll)
  # where the timeout is no whole number of polls (45 s of 2 s polls; 6 s of 0.6 s ones once rounded), the check
  # that fires comes after it: the bound's second poll is needed
  assert beyond_one_poll[2] and any(beyond_one_poll)
  for heartbeat in (6, 20, 120):
    fractions = [i / 40 for i in range(40)] + [1 - 1e-6]  # of a heartbeat interval; the last: just before a beat
    times = [_simulated_jax_abort_seconds(heartbeat, stop=heartbeat / 2 * (6 + f), check_phase=c / 7)
             for f in fractions for c in range(7)]
    assert parallel.jax_abort_earliest_seconds(heartbeat) <= min(times) < parallel.jax_abort_earliest_seconds(
        heartbeat) + 1.0
    assert max(times) <= heartbeat + 1.0


@pytest.mark.parametrize('heartbeat, peer, accepted', [
    (20, 15, False),  # the setting: jax aborted the survivor (134) after 13 s, before the monitor named it
    (20, 6, True),  # tests/integration/test_host_faults.py: 6 + 2 x 0.6 + 1 = 8.2 < 10
    (20, 7, True), (20, 8, False),  # 7 + 1.4 + 1 = 9.4 and 8 + 1.6 + 1 = 10.6 against 10
    (120, 45, True), (120, 60, False),  # the defaults; 60 was the default at 143c8f2
    (4, 0, True),  # the monitor off: nothing to race
])
def test_validation_refuses_a_peer_timeout_that_jax_would_beat(data_cache, heartbeat, peer, accepted):
  config = micro_config(data_cache)
  config.distributed.heartbeat_timeout_seconds = heartbeat
  config.watchdog.peer_timeout_seconds = peer
  if accepted:
    config_lib.validate(config)
  else:
    with pytest.raises(errors.ConfigError) as raised:
      config_lib.validate(config)
    message = str(raised.value)
    assert f'config.watchdog.peer_timeout_seconds={peer:g}' in message
    assert f'config.distributed.heartbeat_timeout_seconds={heartbeat:g}' in message
    assert f'as soon as {heartbeat / 2:g} s' in message and '< heartbeat_timeout_seconds / 2' in message
  if peer:  # validation applies the two bounds of parallel.py, which the replay above checks
    assert (parallel.peer_named_latest_seconds(peer) < parallel.jax_abort_earliest_seconds(heartbeat)) == accepted


def test_a_config_saved_before_the_bound_still_evaluates_with_its_peer_timeout_lowered_to_it():
  """A checkpoint's config from before the bound (the old defaults, 60 s against a 120 s heartbeat) loads, and
  `vlp_jax.evaluate` validates it, with the longest peer timeout the bound allows; a valid pair is kept."""
  saved = config_lib.base_config().to_dict()
  saved['watchdog']['peer_timeout_seconds'], saved['distributed']['heartbeat_timeout_seconds'] = 60, 120
  loaded = config_lib.with_current_defaults(saved)
  assert loaded.watchdog.peer_timeout_seconds == parallel.longest_peer_timeout_seconds(120) == 54
  evaluate_command.eval_config(loaded)  # validates
  assert parallel.peer_named_latest_seconds(55) >= parallel.jax_abort_earliest_seconds(120)  # 54 is the longest
  saved['watchdog']['peer_timeout_seconds'], saved['distributed']['heartbeat_timeout_seconds'] = 6, 20
  assert config_lib.with_current_defaults(saved).watchdog.peer_timeout_seconds == 6
  assert parallel.longest_peer_timeout_seconds(20) == 7 and parallel.longest_peer_timeout_seconds(4) == 0


def test_the_default_timeouts_name_a_lost_peer_before_jax_aborts():
  defaults = config_lib.base_config()
  assert parallel.peer_named_latest_seconds(defaults.watchdog.peer_timeout_seconds) < \
      parallel.jax_abort_earliest_seconds(defaults.distributed.heartbeat_timeout_seconds)


def test_initialize_distributed_passes_the_timeouts(monkeypatch):
  calls = []
  monkeypatch.setattr(jax.distributed, 'initialize', lambda *args, **kwargs: calls.append((args, kwargs)))
  monkeypatch.setenv('JAX_COORDINATOR_ADDRESS', '127.0.0.1:1234')
  monkeypatch.setenv('JAX_NUM_PROCESSES', '2')
  monkeypatch.setenv('JAX_PROCESS_ID', '1')
  parallel.initialize_distributed(**micro_config('').distributed)
  assert calls == [(('127.0.0.1:1234', 2, 1), {'initialization_timeout': 300, 'heartbeat_timeout_seconds': 120,
                                                'shutdown_timeout_seconds': 120})]


# ------------------------------------------------------------------------------------------------ the launchers


def test_exit_codes_are_reported_as_the_shell_does():
  assert [local.shell_code(c) for c in (0, 3, 76, -signal.SIGKILL, -signal.SIGABRT)] == [0, 3, 76, 137, 134]
  assert local.first_failure([None, 0, None], {}) is None
  assert local.first_failure([-9, 76, None], {0: 5.0, 1: 4.0}) == (1, 76)  # the first in time, not in index


def test_the_local_launcher_notices_any_process_and_stops_the_others(tmp_path, monkeypatch):
  (tmp_path / 'exits_on_one.py').write_text(
      'import os, sys, time\n'
      'if os.environ["JAX_PROCESS_ID"] == "1":\n'
      '  sys.exit(3)\n'
      'time.sleep(60)\n')
  monkeypatch.setenv('PYTHONPATH', str(tmp_path))
  began = time.time()
  code = local.launch([], processes=3, devices_per_process=1, module='exits_on_one', log_dir=str(tmp_path / 'logs'),
                      grace=5)
  assert code == 3 and time.time() - began < 20  # process 0, the first polled, runs on


def test_the_others_stop_by_themselves_after_a_retryable_code_or_a_lost_process():
  # a lost process (SIGKILL 137, SIGSEGV 139, SIGABRT 134) is noticed and named by the others (76); a usage error or a
  # crash with a code of its own is not, and neither is the launcher's timeout (124)
  assert [code for code in (0, 1, 2, 3, 75, 76, 77, 124, 134, 137, 139) if local.others_stop_by_themselves(code)] == [
      75, 76, 77, 134, 137, 139]


def _fake_tool(tmp_path, name, codes):
  """An executable `name` on a PATH of its own that prints the exit-code line of the next of `codes` per call."""
  (tmp_path / 'codes').write_text('\n'.join(map(str, codes)) + '\n')
  tool = tmp_path / 'bin' / name
  tool.parent.mkdir(exist_ok=True)
  tool.write_text('#!/usr/bin/env bash\n'
                  f'echo "$*" >> {tmp_path}/calls\n'
                  'case "$*" in *pkill*) exit 0;; esac\n'
                  f'code=$(head -n 1 {tmp_path}/codes); sed -i 1d {tmp_path}/codes\n'
                  'echo "vlp_jax-exit-code=$code"; exit $((code ? 1 : 0))\n')
  tool.chmod(0o755)
  return {**os.environ, 'PATH': f'{tool.parent}:{os.environ["PATH"]}', 'POLL': '0.1', 'GRACE': '1',
          'TPU_NAME': 'pod', 'ZONE': 'zone', 'MAX_RESTARTS': '2'}


@pytest.mark.parametrize('codes, want, runs', [((76, 77, 0), 0, 3), ((75, 75, 75, 0), 75, 3), ((2,), 2, 1)])
def test_tpu_pod_restarts_the_job_on_retryable_codes_up_to_a_limit(tmp_path, codes, want, runs):
  env = _fake_tool(tmp_path, 'gcloud', codes)
  result = subprocess.run(['bash', os.path.join(ROOT, 'launch', 'tpu_pod.sh'), '--config=c.py', '--workdir=w'],
                          env=env, capture_output=True, text=True, timeout=60)
  calls = (tmp_path / 'calls').read_text().splitlines()
  assert result.returncode == want, result.stderr
  assert sum('vlp_jax.main --config=c.py --workdir=w' in c for c in calls) == runs, calls


def test_slurm_restarts_the_job_step_on_retryable_codes(tmp_path):
  env = _fake_tool(tmp_path, 'srun', (137, 4))
  result = subprocess.run(['bash', os.path.join(ROOT, 'launch', 'slurm.sbatch'), '--config=c.py'], env=env,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 4 and 'restart 1 of 2' in result.stderr
  assert len((tmp_path / 'calls').read_text().splitlines()) == 2
