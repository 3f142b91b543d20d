"""What keeps a run safe: a workdir check before compiling, graceful preemption, and the non-finite step guard
(the errors they raise and their exit codes are in vlp_jax/errors.py)."""
from __future__ import annotations

import errno
import os
import signal
import uuid

import jax
from jax.experimental import multihost_utils

from vlp_jax import parallel, paths
from vlp_jax.errors import WorkdirError


def check_workdir_writable(workdir: str, probe_bytes: int = 1 << 20) -> None:
  """Create `workdir` and write, fsync and remove a probe of `probe_bytes`, so that a read-only, full or quota-bound
  workdir fails now, with the path and the cause, rather than at the first checkpoint after hours of training.
  On Google Cloud Storage (`gs://`) a small object is written and deleted: a missing bucket, refused credentials
  or a missing gcsfs fail here alike. Object stores orbax cannot checkpoint to (`s3://`) are refused."""
  if paths.is_remote(workdir):
    if problem := paths.checkpoint_location_problem(workdir):
      raise WorkdirError(errno.EINVAL, f"workdir '{workdir}' is not usable: {problem}")
    check_remote_workdir_writable(workdir)
    return
  probe = os.path.join(workdir, f'.vlp_jax_write_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}')
  try:
    os.makedirs(workdir, exist_ok=True)
    with open(probe, 'wb') as f:
      f.write(b'\0' * probe_bytes)
      f.flush()
      os.fsync(f.fileno())
  except OSError as error:
    cause = {errno.ENOSPC: 'the disk is full', errno.EDQUOT: 'the disk quota is exceeded',
             errno.EFBIG: 'the file size limit is reached', errno.EROFS: 'the filesystem is read-only',
             errno.EACCES: 'permission denied', errno.ENOTDIR: 'a parent of it is a file, not a directory'}.get(
                 error.errno, error.strerror or type(error).__name__)
    raise WorkdirError(error.errno, f"workdir '{workdir}' is not usable: {cause} ({error})") from None
  finally:
    if os.path.exists(probe):
      os.remove(probe)


REMOTE_FILESYSTEMS = {'gs': 'gcsfs'}  # the package etils.epath (fsspec) needs for each object store


def check_remote_workdir_writable(workdir: str) -> None:
  """Write and delete a probe object under `workdir` (on an object store); WorkdirError naming the cause."""
  probe = paths.join(workdir, f'.vlp_jax_write_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}')
  scheme = workdir.split('://', 1)[0]
  try:
    paths.write_bytes(probe, b'\0' * 1024)
    paths.remove(probe)
  except ImportError as error:
    package = REMOTE_FILESYSTEMS.get(scheme, f'the fsspec filesystem for {scheme}://')
    raise WorkdirError(errno.ENOPKG, f"workdir '{workdir}' is on an object store, which needs {package}: "
                       f'`pip install {package}` ({error})') from None
  except Exception as error:  # each client has its own errors: a missing bucket, refused credentials, ...
    raise WorkdirError(getattr(error, 'errno', None) or errno.EIO,
                       f"workdir '{workdir}' is not usable: writing a probe object failed "
                       f'({type(error).__name__}: {error}); check that the bucket exists and that the credentials '
                       'can write to it') from None


class PreemptionWatcher:
  """Turns the first SIGTERM / SIGINT into a request to stop after the current step; a second one stops at once.

  Python signal handlers, installed on entry and restored on exit, on every process. With several processes the
  signal reaches one host, or the hosts at different steps, so the first one also tells every process through the
  coordination service (`parallel.announce_preemption`) and they stop at the same step through jax's preemption sync
  point. (Installing them replaces jax's own SIGTERM handler, which did that for SIGTERM only and ignored a second.)
  """
  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.signal_name = None  # the signal this process received (None when a peer's stopped it)
    self._previous = {}

  def __enter__(self) -> 'PreemptionWatcher':
    try:
      self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
    except ValueError:  # not the main thread: no handlers, as in plain Python
      self._previous = {}
    return self

  def __exit__(self, *exc) -> None:
    for sig, handler in self._previous.items():  # None: a handler installed from C (jax's), which Python cannot
      signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # reinstall; its job is done by then

  def _handle(self, signum, frame) -> None:
    del frame
    if self.signal_name is not None:  # the second signal: one process, the previous behaviour (Ctrl-C raises
      previous = self._previous.get(signum)  # KeyboardInterrupt); several, the signal's default: out at once
      several = jax.process_count() > 1
      signal.signal(signum, signal.SIG_DFL if several or previous is None else previous)
      os.kill(os.getpid(), signum)
      return
    self.signal_name = signal.Signals(signum).name
    print(f'{self.signal_name} received: finishing the current step and saving a checkpoint '
          f'(send it again to stop at once).', flush=True)
    if jax.process_count() > 1:
      parallel.announce_preemption()

  def should_stop(self, step: int) -> bool:
    """Whether to checkpoint `step` and stop (every process must ask at every step when there are several)."""
    if jax.process_count() > 1:
      if not multihost_utils.reached_preemption_sync_point(step):
        return False
      if self.signal_name is None:
        print(f'Another process received a stop signal: stopping after step {step} with every process.', flush=True)
      return True
    return self.signal_name is not None


class NonFiniteGuard:
  """Counts skipped (non-finite) steps and raises after `limit` in a row (limit 0: never)."""

  def __init__(self, limit: int):
    self.limit, self.streak, self.total, self.first_of_streak = limit, 0, 0, None

  def record(self, step: int, nonfinite: bool) -> None:
    if not nonfinite:
      self.streak = 0
      return
    self.total += 1
    self.streak += 1
    self.first_of_streak = step if self.streak == 1 else self.first_of_streak
    print(f'step {step}: non-finite loss or gradient; update skipped ({self.streak} in a row, '
          f'{self.total} in this run)', flush=True)

  def exceeded(self) -> bool:
    return self.limit > 0 and self.streak >= self.limit
