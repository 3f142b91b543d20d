"""Run a module or script with every Python socket connection limited to the loopback, so that a test against a local
storage emulator cannot reach a real cloud endpoint (or a metadata server) through any Python client, even one that
ignores the emulator's settings: such a connection raises instead, and so does looking up any host name but
localhost (a DNS query leaves the machine too).

  python tests/loopback_only.py -m vlp_jax.main --config=... --workdir=gs://bucket/run
  python tests/loopback_only.py tools/compare_runs.py gs://bucket/a gs://bucket/b

Native clients (tensorstore) do not use Python's sockets; the tests point them at the emulator by their own settings.
"""
import ipaddress
import runpy
import socket
import sys

_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo


def _loopback(address) -> bool:
  host = address[0] if isinstance(address, tuple) else address
  if host == 'localhost':
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:  # a host name other than localhost
    return False


def _check(sock: socket.socket, address) -> None:
  if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
    raise ConnectionRefusedError(f'loopback_only: a connection to {address!r} was refused (tests reach only the '
                                 'local emulator)')


def _guarded_connect(self, address):
  _check(self, address)
  return _connect(self, address)


def _guarded_connect_ex(self, address):
  _check(self, address)
  return _connect_ex(self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):
  if host is not None and not _loopback(host.decode() if isinstance(host, bytes) else str(host)):
    raise ConnectionRefusedError(f'loopback_only: looking up {host!r} was refused (tests reach only the local '
                                 'emulator)')
  return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex = _guarded_connect, _guarded_connect_ex
socket.getaddrinfo = _guarded_getaddrinfo

if __name__ == '__main__':
  if sys.argv[1] == '-m':
    sys.argv = [sys.argv[2], *sys.argv[3:]]
    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
  else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name='__main__')
