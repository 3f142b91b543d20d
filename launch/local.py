#!/usr/bin/env python
"""Run a multi-process job on this machine: N CPU processes, each with its own virtual devices, joined by
jax.distributed and the gloo CPU collectives. The same code path as a pod, without a pod.

python launch/local.py --processes=2 --devices_per_process=4 -- --config=configs/clip_shapes.py --workdir=/tmp/mh

Everything after `--` goes to `python -m vlp_jax.main` (or --module). Process 0 prints to this terminal; the others
write `process_<i>.log` under --log_dir (default: a new temporary directory, printed at the start). Every process is
watched: when one fails, the others are stopped (SIGTERM, then SIGKILL after --grace seconds; after a retryable code,
75-77, or a death by signal, they first get --grace seconds to stop by themselves; a stopped process, SIGSTOP, is
SIGKILLed at once), the failed logs' tails are printed and the first failing exit code is returned, as the shell
gives it (a death by signal N is 128 + N).
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def process_env(process_id: int, num_processes: int, devices_per_process: int, port: int) -> dict[str, str]:
  """The environment that makes `parallel.initialize_distributed` join the job as `process_id`."""
  env = dict(os.environ)
  flags = [f for f in env.get('XLA_FLAGS', '').split() if not f.startswith('--xla_force_host_platform_device_count')]
  env.update({
      'JAX_PLATFORMS': 'cpu', 'JAX_CPU_COLLECTIVES_IMPLEMENTATION': 'gloo',
      'XLA_FLAGS': ' '.join(flags + [f'--xla_force_host_platform_device_count={devices_per_process}']),
      'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}', 'JAX_NUM_PROCESSES': str(num_processes),
      'JAX_PROCESS_ID': str(process_id), 'PYTHONPATH': os.pathsep.join(p for p in (ROOT, env.get('PYTHONPATH')) if p),
  })
  return env


def shell_code(returncode: int) -> int:
  """A process's exit status as a shell reports it: a death by signal N (Popen's -N) is 128 + N, never negative."""
  return 128 - returncode if returncode < 0 else returncode


def first_failure(codes: list[int | None], failed_at: dict[int, float]) -> tuple[int, int] | None:
  """(process, shell exit code) of the process that failed first (by `failed_at`, then by index); None while none
  has. `codes`: each process's Popen returncode (None while it runs)."""
  failed = sorted((failed_at[i], i) for i, code in enumerate(codes) if code not in (None, 0))
  return (failed[0][1], shell_code(codes[failed[0][1]])) if failed else None


RETRYABLE = (75, 76, 77)  # vlp_jax/errors.py: the other processes stop by themselves (a preemption or a lost peer)


def others_stop_by_themselves(code: int) -> bool:
  """Whether, after a process's shell exit `code`, the others stop by themselves and so get --grace seconds first:
  after a retryable code, and after a death by signal (a lost process: their next collective or their peer monitor
  notices and names it, exit 76). A SIGTERM from here at that moment would start a checkpoint at jax's preemption
  sync point, whose barrier the lost process can no longer reach: jax then aborts the process instead."""
  return code in RETRYABLE or code > 128


def is_stopped(pid: int) -> bool:
  """Whether the process is stopped (SIGSTOP, SIGTSTP; state T or t in /proc/<pid>/stat): it can neither exit by
  itself nor act on a SIGTERM until continued. False where /proc cannot say (not Linux, already gone)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] in ('T', 't')
  except (OSError, IndexError):
    return False


def stop(procs: list[subprocess.Popen], grace: float, wait_first: bool = False) -> None:
  """SIGTERM to every process still running (each checkpoints and exits 75, or is already on its way out); SIGKILL
  to those still there after `grace` seconds. `wait_first`: first give them `grace` seconds to exit by themselves
  (a signal would cut short their own way out). A stopped process gets SIGKILL at once: waiting for it is futile."""
  deadline = time.time() + grace
  while wait_first and time.time() < deadline and any(p.poll() is None and not is_stopped(p.pid) for p in procs):
    time.sleep(0.1)
  for p in (p for p in procs if p.poll() is None):
    if is_stopped(p.pid):
      p.kill()
    else:
      p.send_signal(signal.SIGTERM)
  deadline = time.time() + grace
  for p in procs:
    try:
      p.wait(timeout=max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
      p.kill()
      p.wait()


def launch(args: list[str], processes: int, devices_per_process: int, module: str = 'vlp_jax.main',
           log_dir: str | None = None, timeout: float | None = None, grace: float = 30.0) -> int:
  """Start the processes and watch all of them: when one fails, stop the others. Returns 0, or the shell exit code
  (0-255) of the first to fail; 124 on `timeout`.

  The processes run in a session of their own, so that a Ctrl-C in this terminal reaches this launcher only: it
  passes each SIGINT / SIGTERM on to every process once, as a SIGTERM (the first: checkpoint and exit 75; a
  second: stop at once), rather than every process getting the terminal's signal and then the launcher's.
  """
  log_dir = log_dir or tempfile.mkdtemp(prefix='vlp_jax_local_')
  os.makedirs(log_dir, exist_ok=True)
  port = free_port()
  print(f'launching {processes} processes x {devices_per_process} CPU devices, coordinator 127.0.0.1:{port}; '
        f'logs of processes 1..{processes - 1} in {log_dir}', flush=True)
  procs, logs = [], []
  for i in range(processes):
    log = None if i == 0 else open(os.path.join(log_dir, f'process_{i}.log'), 'w')
    logs.append(log)
    procs.append(subprocess.Popen([sys.executable, '-m', module, *args], cwd=ROOT,
                                  env=process_env(i, processes, devices_per_process, port), start_new_session=True,
                                  stdout=log, stderr=subprocess.STDOUT if log else None))

  def forward(signum, frame) -> None:
    del frame
    print(f'launcher: {signal.Signals(signum).name} received: passing SIGTERM on to every process', file=sys.stderr,
          flush=True)
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGTERM)

  previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
  began, failed_at, failure = time.time(), {}, None
  try:
    while True:
      codes = [p.poll() for p in procs]  # every process, every time
      for i, code in enumerate(codes):
        if code not in (None, 0):
          failed_at.setdefault(i, time.time())
      failure = first_failure(codes, failed_at)
      if failure or all(code is not None for code in codes):
        break
      if timeout and time.time() - began > timeout:
        failure = (-1, 124)
        break
      time.sleep(0.1)
    if failure and any(p.poll() is None for p in procs):
      print(f'process {failure[0]} exited with {failure[1]}; stopping the others' if failure[0] >= 0 else
            'timed out; stopping every process', file=sys.stderr, flush=True)
  finally:
    stop(procs, grace, wait_first=bool(failure) and failure[0] >= 0 and others_stop_by_themselves(failure[1]))
    for sig, handler in previous.items():
      signal.signal(sig, handler)
    for log in logs:
      if log:
        log.close()
  codes = [shell_code(p.returncode) for p in procs]
  print('exit codes: ' + ', '.join(f'process {i}: {c}' for i, c in enumerate(codes)), file=sys.stderr, flush=True)
  code = failure[1] if failure else 0
  if code:
    for i in range(1, processes):
      if codes[i]:
        with open(os.path.join(log_dir, f'process_{i}.log')) as f:
          print(f'--- process {i} (exit {codes[i]}), last lines:\n' + ''.join(f.readlines()[-30:]), file=sys.stderr)
  return code


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--processes', type=int, default=2)
  parser.add_argument('--devices_per_process', type=int, default=4)
  parser.add_argument('--module', default='vlp_jax.main', help='Python module every process runs.')
  parser.add_argument('--log_dir', default=None)
  parser.add_argument('--timeout', type=float, default=None, help='Seconds before every process is stopped.')
  parser.add_argument('--grace', type=float, default=30.0,
                      help='Seconds the others get to exit after one fails (or after --timeout) before SIGKILL.')
  parser.add_argument('args', nargs=argparse.REMAINDER, help='-- then the arguments of the module')
  opts = parser.parse_args()
  if opts.processes < 1 or opts.devices_per_process < 1:
    parser.error('--processes and --devices_per_process must be positive')
  args = opts.args[1:] if opts.args[:1] == ['--'] else opts.args
  sys.exit(launch(args, opts.processes, opts.devices_per_process, opts.module, opts.log_dir, opts.timeout,
                  opts.grace))


if __name__ == '__main__':
  main()
