#!/usr/bin/env python
"""Run a multi-process job on this machine: N CPU processes, each with its own virtual devices, joined by
jax.distributed and the gloo CPU collectives. The same code path as a pod, without a pod.

python launch/local.py --processes=2 --devices_per_process=4 -- --config=configs/clip_shapes.py --workdir=/tmp/mh

Everything after `--` goes to `python -m vlp_jax.main` (or --module). Process 0 prints to this terminal; the others
write `process_<i>.log` under --log_dir (default: a new temporary directory, printed at the start). If a process
fails, the others are stopped, its log tail is printed and its exit code returned.
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


def launch(args: list[str], processes: int, devices_per_process: int, module: str = 'vlp_jax.main',
           log_dir: str | None = None, timeout: float | None = None) -> int:
  """Start the processes, wait for all of them; returns 0 or the first failing exit code."""
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
                                  env=process_env(i, processes, devices_per_process, port),
                                  stdout=log, stderr=subprocess.STDOUT if log else None))
  began, code = time.time(), 0
  try:
    while any(p.poll() is None for p in procs):
      failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode not in (None, 0)]
      if failed or (timeout and time.time() - began > timeout):
        i, code = failed[0] if failed else (-1, 124)
        print(f'process {i} exited with {code}; stopping the others' if failed else 'timed out; stopping',
              file=sys.stderr, flush=True)
        break
      time.sleep(0.2)
  finally:
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    for p in procs:
      try:
        p.wait(timeout=30)
      except subprocess.TimeoutExpired:
        p.kill()
    for log in logs:
      if log:
        log.close()
  codes = [p.returncode for p in procs]
  code = code or next((c for c in codes if c), 0)
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
  parser.add_argument('args', nargs=argparse.REMAINDER, help='-- then the arguments of the module')
  opts = parser.parse_args()
  if opts.processes < 1 or opts.devices_per_process < 1:
    parser.error('--processes and --devices_per_process must be positive')
  args = opts.args[1:] if opts.args[:1] == ['--'] else opts.args
  sys.exit(launch(args, opts.processes, opts.devices_per_process, opts.module, opts.log_dir, opts.timeout))


if __name__ == '__main__':
  main()
