"""When jax's coordination service aborts the survivors of a stopped peer, measured with two local processes
(`launch/local.py`), against the bound that config validation holds the peer monitor to
(parallel.jax_abort_earliest_seconds: heartbeat_timeout / 2; docs/reliability.md, "Lost or hung hosts").

Process 1 waits $VLP_JAX_STOP_DELAY seconds after joining (its agent sent a heartbeat as it joined, and sends one
every heartbeat_timeout / 2 from then), writes the time into the coordination store and SIGSTOPs itself; process 0
prints how long ago that was, every 50 ms, until jax aborts it (SIGABRT: exit 134). Nothing else runs: no peer
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
DELAY_ENV = 'VLP_JAX_STOP_DELAY'  # seconds from joining until process 1 stops
STOP_KEY = 'vlp_jax_test/stopped_at'
HEARTBEAT_TIMEOUT = 10  # short, so that a trial takes seconds: jax may abort from 5 s after the stop, at most 11 s
# Stops right after the heartbeat sent on joining, and 2 s before the next (5 s later): joining returns a little
# after that heartbeat (well under a second here, even loaded), so the second stop still comes before the next one.
STOP_DELAYS = (0.0, HEARTBEAT_TIMEOUT / 2 - 2.0)


def main() -> None:
  heartbeat = int(os.environ[TIMEOUT_ENV])
  parallel.initialize_distributed(initialization_timeout_seconds=60, heartbeat_timeout_seconds=heartbeat,
                                  shutdown_timeout_seconds=5)
  client = parallel.coordination_client()
  if os.environ['JAX_PROCESS_ID'] == '1':
    time.sleep(float(os.environ.get(DELAY_ENV, '0')))
    client.key_value_set(STOP_KEY, repr(time.time()))
    os.kill(os.getpid(), signal.SIGSTOP)
  stopped_at = float(client.blocking_key_value_get(STOP_KEY, 60_000))
  while time.time() - stopped_at < 3 * heartbeat:
    print(f'ALIVE {time.time() - stopped_at:.3f}', flush=True)
    time.sleep(0.05)
  print('SURVIVED', flush=True)
  sys.stdout.flush()
  os._exit(0)


def abort_seconds(heartbeat: int, delay: float) -> tuple[int, float, str]:
  """One trial: (process 0's exit code, seconds from process 1's stop to process 0's last sign of life, the output)."""
  env = {**os.environ, TIMEOUT_ENV: str(heartbeat), DELAY_ENV: str(delay),
         'PYTHONPATH': os.pathsep.join([os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))])}
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'launch', 'local.py'), '--processes=2', '--devices_per_process=1',
       '--grace=1', f'--timeout={10 * heartbeat + 60}', '--module=test_jax_heartbeat_abort'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=10 * heartbeat + 120)
  output = result.stdout + result.stderr
  codes = re.search(r'exit codes: process 0: (\d+)', output)
  alive = re.findall(r'ALIVE ([\d.]+)', output)
  return int(codes.group(1)) if codes else -1, float(alive[-1]) if alive else -1.0, output


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


if __name__ == '__main__':
  main()
