"""The one registry mechanism: a named table of one kind of thing (objectives, towers, eval sets, evaluators, ...).

A module adds an entry with the table's decorator (or `add` for a value that is not a class or function); a table
that names a package imports that package's modules the first time it is read, so adding an entry is adding a file.
Looking up an unknown name raises an error that names the config key and the valid choices, which is also what
config validation reports.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar('T')
_MISSING = object()


class RegistryError(ValueError):
  """An unknown or duplicate name; the message names the config key and the valid choices."""


def check_choice(key: str, value: Any, choices) -> None:
  """Raise RegistryError when `value` is not one of `choices`, naming `config.<key>` and the choices."""
  if value not in choices:
    raise RegistryError(f'config.{key}={value!r} is not valid; valid choices: {list(choices)}')


class Registry(Generic[T]):
  """Names -> entries of one kind, in registration order.

  kind: what an entry is, for messages ('objective'). key: the config key that picks entries ('objective.name').
  package: modules to import before the first read (their decorators fill the table); None when the entries are
  declared where the registry is.
  """

  def __init__(self, kind: str, key: str, package: str | None = None):
    self.kind, self.key, self.package = kind, key, package
    self._entries: dict[str, T] = {}
    self._discovered = package is None

  def add(self, name: str, entry: T) -> T:
    if name in self._entries:
      raise RegistryError(f"{self.kind} '{name}' is registered twice")
    self._entries[name] = entry
    return entry

  def register(self, name: str) -> Callable[[T], T]:
    """Decorator: `@REGISTRY.register('name')` on a class or function adds it under `name` (a class also gets
    `cls.name = name`)."""
    def wrap(entry: T) -> T:
      if isinstance(entry, type):
        entry.name = name
      return self.add(name, entry)
    return wrap

  def _discover(self) -> None:
    if self._discovered:
      return
    self._discovered = True
    package = importlib.import_module(self.package)
    for module in pkgutil.iter_modules(package.__path__):
      importlib.import_module(f'{self.package}.{module.name}')

  def names(self) -> list[str]:
    self._discover()
    return list(self._entries)

  def get(self, name: str, default: Any = _MISSING) -> T:
    """The entry `name`; `default` when given and there is none, else RegistryError naming the choices."""
    self._discover()
    if name not in self._entries:
      if default is not _MISSING:
        return default
      raise RegistryError(f'config.{self.key} has {name!r}, which is not a registered {self.kind}; valid choices: '
                          f'{list(self._entries)}')
    return self._entries[name]

  def check(self, name: Any) -> None:
    """Raise RegistryError naming the key and the choices when `name` is not registered."""
    self.get(name)

  def items(self) -> Iterator[tuple[str, T]]:
    self._discover()
    return iter(list(self._entries.items()))

  def __contains__(self, name: object) -> bool:
    self._discover()
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())

  def __len__(self) -> int:
    return len(self.names())

  def __getitem__(self, name: str) -> T:
    return self.get(name)

  # Mapping-style writes, so that a test can swap an entry in and out (pytest's monkeypatch.setitem).
  def __setitem__(self, name: str, entry: T) -> None:
    self._discover()
    self._entries[name] = entry

  def __delitem__(self, name: str) -> None:
    del self._entries[name]
