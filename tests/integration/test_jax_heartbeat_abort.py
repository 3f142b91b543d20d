"""When jax's coordination service aborts the survivors of a stopped peer, measured with two local processes
(`launch/local.py`), against the bound that config validation holds the peer monitor to
(parallel.jax_abort_earliest_seconds: heartbeat_timeout / 2; docs/reliability.md, "Lost or hung hosts").

Process 1 (or $VLP_JAX_STOPPED_PROCESS) waits $VLP_JAX_STOP_DELAY seconds after joining (its agent sent a heartbeat
as it joined, and sends one every heartbeat_timeout / 2 from then), prints the time and SIGSTOPs itself; the other
prints the time every 50 ms until jax aborts it (SIGABRT: exit 134). Nothing else runs: no peer
monitor, no training. A stop just after a heartbeat is declared dead about heartbeat_timeout (+1 s) later, a stop
just before the next one half that. This file is also the module the launcher runs (`--module=
test_jax_heartbeat_abort`), and a measurement on its own:

  PYTHONPATH=tests/integration:tests VLP_JAX_HEARTBEAT_TIMEOUT=20 VLP_JAX_STOP_DELAY=9 python launch/local.py \
      --processes=2 --devices_per_process=1 --grace=1 --module=test_jax_heartbeat_abort
"""
from support import ROOT
import pytest
import os
import re
import signal
import subprocess
import sys
import time

from vlp_jax import parallel

TIMEOUT_ENV = 'VLP_JAX_HEARTBEAT_TIMEOUT'  # seconds, jax's heartbeat_timeout_seconds
DELAY_ENV = 'VLP_JAX_STOP_DELAY'  # seconds from joining until the process stops
STOPPED_ENV = 'VLP_JAX_STOPPED_PROCESS'  # which process stops ('1'; '0': the coordinator)
HEARTBEAT_TIMEOUT = 10  # short, so that a trial takes seconds: jax may abort from 5 s after the stop, at most 11 s
# Stops right after the heartbeat sent on joining, and 2 s before the next (5 s later): joining returns a little
# after that heartbeat (well under a second here, even loaded), so the second stop still comes before the next one.
STOP_DELAYS = (0.0, HEARTBEAT_TIMEOUT / 2 - 2.0)


def main() -> None:
  heartbeat, delay = int(os.environ[TIMEOUT_ENV]), float(os.environ.get(DELAY_ENV, '0'))
  parallel.initialize_distributed(initialization_timeout_seconds=60, heartbeat_timeout_seconds=heartbeat,
                                  shutdown_timeout_seconds=5)
  if os.environ['JAX_PROCESS_ID'] == os.environ.get(STOPPED_ENV, '1'):
    time.sleep(delay)
    print(f'STOPPED {time.time():.3f}', flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
  ends = time.time() + delay + 3 * heartbeat
  while time.time() < ends:  # both processes run on this machine's clock
    print(f'ALIVE {time.time():.3f}', flush=True)
    time.sleep(0.05)
  print('SURVIVED', flush=True)
  os._exit(0)


def abort_seconds(heartbeat: int, delay: float, stopped: int = 1) -> tuple[int, float, str]:
  """One trial: (the survivor's exit code, seconds from the stop to its last sign of life, the output)."""
  env = {**os.environ, TIMEOUT_ENV: str(heartbeat), DELAY_ENV: str(delay), STOPPED_ENV: str(stopped),
         'PYTHONPATH': os.pathsep.join([os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))])}
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'launch', 'local.py'), '--processes=2', '--devices_per_process=1',
       '--grace=1', f'--timeout={10 * heartbeat + 60}', '--module=test_jax_heartbeat_abort'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=10 * heartbeat + 120)
  output = result.stdout + result.stderr  # process 0's lines, and the tail of process 1's log once it failed
  codes = re.search(r'exit codes: process 0: (\d+), process 1: (\d+)', output)
  stop, alive = re.search(r'STOPPED ([\d.]+)', output), re.findall(r'ALIVE ([\d.]+)', output)
  if not (codes and stop and alive):
    return -1, -1.0, output
  return int(codes.group(2 - stopped)), float(alive[-1]) - float(stop.group(1)), output


@pytest.mark.slow
def test_jax_aborts_the_survivor_of_a_stopped_peer_no_sooner_than_half_its_heartbeat_timeout():
  earliest = parallel.jax_abort_earliest_seconds(HEARTBEAT_TIMEOUT)
  seconds = []
  for delay in STOP_DELAYS:
    code, alive, output = abort_seconds(HEARTBEAT_TIMEOUT, delay)
    assert code == 128 + signal.SIGABRT, output[-3000:]  # jax's fatal error, not an exit of ours
    # alive until at least the bound (less one print interval), gone within the timeout + 1 s check + slack
    assert earliest - 0.1 <= alive <= HEARTBEAT_TIMEOUT + 2.0, (delay, alive, output[-3000:])
    seconds.append(alive)
  # the stop just before a heartbeat is declared dead well before heartbeat_timeout: the rule cannot be
  # `peer_timeout < heartbeat_timeout`, as it was at 143c8f2
  assert seconds[1] <= HEARTBEAT_TIMEOUT - 1.5 and seconds[0] - seconds[1] >= 1.5, seconds
  # a stopped coordinator: the survivor's next heartbeat times out, later still (parallel.py)
  code, alive, output = abort_seconds(HEARTBEAT_TIMEOUT, STOP_DELAYS[1], stopped=0)
  assert code == 128 + signal.SIGABRT and earliest <= alive <= HEARTBEAT_TIMEOUT + 2.0, (alive, output[-3000:])


if __name__ == '__main__':
  main()
