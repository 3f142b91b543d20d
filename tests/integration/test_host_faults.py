"""A job of two processes that loses or hangs one (docs/reliability.md, "Lost or hung hosts"), through
`launch/local.py`: every process is out within a minute of the fault with a named exit code, the last complete
checkpoint survives, and the restarts end bit-identical to an uninterrupted run.

One chain of runs shares a workdir, each resuming from what the previous one left (a separate pair of runs per fault
would double the compile time): a SIGKILL of process 1 while its asynchronous save is writing (both the lost
non-coordinator and the kill during a save), a hang of process 1's main thread (its heartbeats alive), a SIGINT to
process 1 only, a SIGSTOP of process 1, a SIGKILL of process 0 (the coordinator), a SIGTERM to process 1 only, then a
run to the end, compared with an uninterrupted run bit for bit.

The faults are injected from inside the training processes, at a given step: this file is also the module the
launcher runs (`--module=test_host_faults`), which wraps the loop's `dispatch_step` and `Checkpointer.save` and then
runs the train command.
"""
from support import FAST_COMPILE_XLA_FLAGS, MICRO_CONFIG, ROOT
import pytest
import json
import os
import re
import signal
import subprocess
import sys
import time

import chex

from vlp_jax import errors
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.cli import train_command
from vlp_jax.training import checkpoint, loop
from vlp_jax.training.checkpoint import MANIFEST, file_digests

FAULT = 'VLP_JAX_TEST_FAULT'  # '<action>:<process>:<step>', read by `planned_fault`
TOTAL_STEPS = 14
OVERRIDES = {
    # No evaluation: only the parameters are compared (an end-of-run evaluation compiles in every process).
    'total_steps': TOTAL_STEPS, 'checkpoint.every_steps': 2, 'eval.every_steps': 100, 'eval.datasets': '()',
    'log_every_steps': 4,
    # Short timeouts, so that each fault ends in seconds: the peer monitor below jax's heartbeat timeout, the step
    # watchdog well above the peer monitor (a process waiting on a lost peer outside a collective, as process 0 in
    # the preemption sync point after the kill during a save, must name it, 76, before its watchdog fires, 77: at 5 s
    # it once did not). A step that neither compiles, evaluates nor checkpoints (those get first_step_seconds or
    # eval_seconds more) took at most 0.05 s here, 2 processes on 2 cores at a load average of 9.
    'distributed.heartbeat_timeout_seconds': 20, 'distributed.shutdown_timeout_seconds': 10,
    'watchdog.peer_timeout_seconds': 6, 'watchdog.step_timeout_seconds': 12, 'watchdog.first_step_seconds': 600,
    'watchdog.eval_seconds': 300,
}
OUT_WITHIN = 60  # seconds from the fault until the launcher has stopped every process
GRACE = 15  # the launcher's --grace: seconds a process gets to stop by itself, then again after a SIGTERM


def planned_fault() -> tuple[str, str, int]:
  """(action, process, step) from $VLP_JAX_TEST_FAULT, '<action>:<process>:<step>'."""
  action, process, step = os.environ[FAULT].split(':')
  return action, process, int(step)


def fault_starts(action: str, step: int) -> None:
  """The line `run_job` times the fault from."""
  print(f'FAULT {action} at step {step}, time {time.time():.3f}', flush=True)


def inject_fault(dispatch_step):
  """`dispatch_step` that, on the process and before the step that $VLP_JAX_TEST_FAULT names, first prints the time
  and then: kill (SIGKILL itself), stop (SIGSTOP itself), hang (its main thread sleeps for ever), int or term (SIGINT
  or SIGTERM itself, then goes on)."""
  action, process, at_step = planned_fault()
  signals = {'kill': signal.SIGKILL, 'stop': signal.SIGSTOP, 'int': signal.SIGINT, 'term': signal.SIGTERM}

  def dispatch(ctx, step):
    if step == at_step and os.environ['JAX_PROCESS_ID'] == process and action in (*signals, 'hang'):
      fault_starts(action, step)
      if action == 'hang':
        time.sleep(10**6)
      os.kill(os.getpid(), signals[action])
    return dispatch_step(ctx, step)
  return dispatch


def inject_save_fault(save):
  """`Checkpointer.save` that, for the action killsave, SIGKILLs the process that $VLP_JAX_TEST_FAULT names as soon
  as its save of the step named has returned: the state is in host memory and orbax's thread is writing the files
  (the line says whether it still was), nothing committed yet."""
  action, process, at_step = planned_fault()

  def save_then_kill(self, step, *args, **kwargs):
    save(self, step, *args, **kwargs)
    if action == 'killsave' and step == at_step and os.environ['JAX_PROCESS_ID'] == process:
      writing = self.manager.is_saving_in_progress()
      fault_starts(action, step)
      print(f'orbax still writing: {writing}', flush=True)
      os.kill(os.getpid(), signal.SIGKILL)
  return save_then_kill


def start_job(workdir, log_dir, data_cache, fault=''):
  """Start `launch/local.py` with 2 processes x 1 device on the micro config, running this module when `fault` is
  set; `finish_job` waits for it."""
  env = {**os.environ, 'VLP_JAX_CACHE': data_cache, FAULT: fault,
         'PYTHONPATH': os.pathsep.join([os.path.dirname(__file__), os.path.dirname(MICRO_CONFIG)])}
  env['XLA_FLAGS'] = FAST_COMPILE_XLA_FLAGS  # the launcher gives each process its own device
  module = ['--module=test_host_faults'] if fault else []
  os.makedirs(log_dir, exist_ok=True)
  with open(os.path.join(log_dir, 'launcher.log'), 'w') as output:  # a file, not a pipe nobody reads meanwhile
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, 'launch', 'local.py'), '--processes=2', '--devices_per_process=1',
         f'--log_dir={log_dir}', '--timeout=500', f'--grace={GRACE}', *module, '--', f'--config={MICRO_CONFIG}',
         f'--workdir={workdir}', *(f'--config.{key}={value}' for key, value in OVERRIDES.items())],
        cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)


def finish_job(job, log_dir):
  """(launcher exit code, [process 0's output + the launcher's, process 1's log], seconds from the fault to the
  launcher's exit or None) of a job from `start_job`."""
  job.wait(timeout=560)
  ended = time.time()
  logs = [open(os.path.join(log_dir, 'launcher.log')).read(), open(os.path.join(log_dir, 'process_1.log')).read()]
  faulted = re.search(r'FAULT \w+ at step \d+, time ([\d.]+)', logs[0] + logs[1])
  return job.returncode, logs, (ended - float(faulted.group(1))) if faulted else None


def run_job(workdir, log_dir, data_cache, fault=''):
  """`start_job` and `finish_job`: one job run to its end."""
  return finish_job(start_job(workdir, log_dir, data_cache, fault), log_dir)


def process_codes(logs):
  """{process: exit code} from the launcher's last line."""
  return {int(i): int(c) for i, c in re.findall(r'process (\d+): (\d+)', logs[0].rsplit('exit codes:', 1)[-1])}


def complete_steps(workdir):
  """The steps with a manifest, in order; each one's files must still match it (no fault tears a complete step)."""
  directory = os.path.join(workdir, 'checkpoints')
  steps = sorted(int(name) for name in os.listdir(directory)
                 if name.isdigit() and os.path.exists(os.path.join(directory, name, MANIFEST)))
  for step in steps:
    with open(os.path.join(directory, str(step), MANIFEST)) as f:
      assert json.load(f)['files'] == file_digests(os.path.join(directory, str(step))), f'step {step} was torn'
  return steps


def test_the_launcher_kills_a_stopped_process_at_once(tmp_path):
  """A process stopped by SIGSTOP can neither exit by itself nor act on a SIGTERM: once another has failed with a
  retryable code, the launcher SIGKILLs it rather than waiting out its grace for it, twice."""
  (tmp_path / 'stops_one.py').write_text(
      'import os, signal, sys, time\n'
      'if os.environ["JAX_PROCESS_ID"] == "1":\n'
      '  os.kill(os.getpid(), signal.SIGSTOP)\n'
      'time.sleep(0.5)\n'
      'sys.exit(76)\n')
  began = time.time()
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'launch', 'local.py'), '--processes=2', '--devices_per_process=1',
       f'--log_dir={tmp_path / "logs"}', f'--grace={GRACE}', '--module=stops_one'],
      env={**os.environ, 'PYTHONPATH': str(tmp_path)}, capture_output=True, text=True, timeout=60)
  assert result.returncode == errors.EXIT_PEER_LOST, result.stderr
  assert 'process 0: 76, process 1: 137' in result.stderr and time.time() - began < GRACE, result.stderr


@pytest.mark.slow
def test_a_lost_hung_or_interrupted_process_stops_the_job_fast_and_named_and_the_restart_is_exact(
    data_cache, tmp_path, request):
  workdir = str(tmp_path / 'run')
  timings = {}

  # SIGKILL of process 1 (not the coordinator) just after its asynchronous save of step 4 has returned, orbax still
  # writing: process 0 sees the next collective fail, names process 1 and exits 76 at once, without waiting in jax's
  # shutdown barrier. The launcher reports the first failure: the kill's 137. Step 4 is never committed (orbax's
  # commit waits for every process's files), step 2 stays complete, and the next run resumes from it.
  code, logs, timings['kill during a save'] = run_job(workdir, str(tmp_path / 'logs_kill'), data_cache, 'killsave:1:4')
  assert code == 128 + signal.SIGKILL, logs[0][-3000:]
  assert process_codes(logs) == {0: errors.EXIT_PEER_LOST, 1: 128 + signal.SIGKILL}, logs[0][-3000:]
  assert 'orbax still writing: True' in logs[1] and 'lost process 1' in logs[0], logs[0][-3000:] + logs[1][-3000:]
  assert timings['kill during a save'] < OUT_WITHIN and complete_steps(workdir) == [2]
  assert '4' not in os.listdir(os.path.join(workdir, 'checkpoints'))  # only orbax's temporary directory

  # The run without faults, to compare the last restart with, trains beside the rest of the chain: it uses the CPU
  # the chain leaves idle while it waits for its timeouts, and loads the programs the first job compiled from the
  # persistent cache (started beside it, it would compile them too). A failure on the way stops it (SIGTERM: the
  # launcher stops both).
  reference = start_job(str(tmp_path / 'uninterrupted'), str(tmp_path / 'logs_uninterrupted'), data_cache)
  request.addfinalizer(lambda: reference.poll() is None and (reference.terminate(), reference.wait(timeout=60)))

  # Process 1's main thread hangs before step 7 while its threads (and jax's heartbeats) live: the watchdogs of both
  # name the step and dump their stacks (process 1's shows the sleep), exit 77. Process 0 may instead see process 1
  # leave first (76).
  code, logs, timings['hang'] = run_job(workdir, str(tmp_path / 'logs_hang'), data_cache, 'hang:1:7')
  assert 'Resumed from step 2' in logs[0], logs[0][-3000:]
  codes = process_codes(logs)
  assert codes[1] == errors.EXIT_HUNG and codes[0] in (errors.EXIT_HUNG, errors.EXIT_PEER_LOST), logs[0][-3000:]
  assert code in (errors.EXIT_HUNG, errors.EXIT_PEER_LOST)
  assert 'watchdog: step 7 has not finished' in logs[1], logs[1][-3000:]
  assert re.search(r'File ".*test_host_faults.py", line \d+ in dispatch', logs[1]), logs[1][-3000:]
  assert timings['hang'] < OUT_WITHIN + OVERRIDES['watchdog.step_timeout_seconds']
  assert complete_steps(workdir)[-1] in (4, 6)

  # SIGINT to process 1 only, before step 9: both processes stop at the same step, save it and exit 75.
  code, logs, timings['sigint'] = run_job(workdir, str(tmp_path / 'logs_sigint'), data_cache, 'int:1:9')
  assert code == errors.EXIT_PREEMPTED and process_codes(logs) == {0: 75, 1: 75}, logs[0][-3000:]
  stopped = int(re.search(r'stopped after step (\d+)', logs[1]).group(1))
  assert f'stopped after step {stopped}' in logs[0] and 'another process received a stop signal' in logs[0]
  assert timings['sigint'] < OUT_WITHIN and complete_steps(workdir)[-1] == stopped >= 8

  # Process 1 SIGSTOPped before step 11: its heartbeats stop, process 0's peer monitor names it and exits 76; the
  # launcher then SIGKILLs the stopped process at once, without waiting out its grace for it.
  code, logs, timings['sigstop'] = run_job(workdir, str(tmp_path / 'logs_sigstop'), data_cache, 'stop:1:11')
  assert code == errors.EXIT_PEER_LOST and process_codes(logs) == {0: 76, 1: 128 + signal.SIGKILL}, logs[0][-3000:]
  assert re.search(r'lost process 1 \(last step done: \d+\): no heartbeat for 6 s', logs[0]), logs[0][-3000:]
  assert timings['sigstop'] < OVERRIDES['watchdog.peer_timeout_seconds'] + GRACE, timings
  assert complete_steps(workdir)[-1] == stopped

  # SIGKILL of process 0, the coordinator, before step 13, step 12's save in flight: jax's client on process 1 finds
  # the coordination service gone and aborts within a second (134, from a C++ thread; measured 0.1 s). It may instead
  # exit 76 first (its peer monitor cannot reach the service, or its collective failed), whichever comes first
  # under load. The launcher reports the first failure, the kill's 137. Step 10 (its manifest written before step 12's
  # save began) is the last complete one; step 12 never gets its manifest, as process 0 writes them.
  code, logs, timings['coordinator kill'] = run_job(workdir, str(tmp_path / 'logs_kill0'), data_cache, 'kill:0:13')
  codes = process_codes(logs)
  assert code == 128 + signal.SIGKILL and codes[0] == 128 + signal.SIGKILL, logs[0][-3000:]
  assert codes[1] in (128 + signal.SIGABRT, errors.EXIT_PEER_LOST), logs[1][-3000:]
  assert timings['coordinator kill'] < OUT_WITHIN and complete_steps(workdir)[-1] == 10

  # SIGTERM to process 1 only, before step 12 (a scheduler preempting one host): the same coordinated stop as SIGINT.
  code, logs, timings['sigterm'] = run_job(workdir, str(tmp_path / 'logs_sigterm'), data_cache, 'term:1:12')
  assert code == errors.EXIT_PREEMPTED and process_codes(logs) == {0: 75, 1: 75}, logs[0][-3000:]
  assert 'Resumed from step 10' in logs[0] and 'SIGTERM received' in logs[1], logs[0][-3000:] + logs[1][-3000:]
  stopped = int(re.search(r'stopped after step (\d+)', logs[1]).group(1))
  assert f'stopped after step {stopped}' in logs[0] and 'another process received a stop signal' in logs[0]
  assert timings['sigterm'] < OUT_WITHIN and complete_steps(workdir)[-1] == stopped >= 11

  # The last restart ends where the uninterrupted run did, bit for bit.
  code, logs, _ = run_job(workdir, str(tmp_path / 'logs_end'), data_cache)
  assert code == 0 and f'Resumed from step {stopped}' in logs[0], logs[0][-3000:]
  code, reference_logs, _ = finish_job(reference, str(tmp_path / 'logs_uninterrupted'))
  assert code == 0, reference_logs[0][-3000:] + reference_logs[1][-3000:]
  chex.assert_trees_all_equal(load_variables(workdir)[0], load_variables(str(tmp_path / 'uninterrupted'))[0])
  print('fault -> every process out after (s):', {k: round(v, 1) for k, v in timings.items()})


if __name__ == '__main__':  # the module each process of a faulty run starts (run_job)
  loop.dispatch_step = inject_fault(loop.dispatch_step)
  checkpoint.Checkpointer.save = inject_save_fault(checkpoint.Checkpointer.save)
  train_command.run_command()
