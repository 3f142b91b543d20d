"""The registry (vlp_jax/registry.py): entries in registration order, duplicates refused, unknown names reported with
the config key and the valid choices, package discovery on the first read, and the mapping-style writes tests use."""
import sys
import textwrap

import pytest

from vlp_jax.registry import Registry, RegistryError, check_choice


def _table(**entries) -> Registry:
  table = Registry('widget', 'model.widget')
  for name, entry in entries.items():
    table.add(name, entry)
  return table


def test_entries_keep_their_registration_order():
  table = _table(zeta=1, alpha=2, mid=3)
  assert table.names() == ['zeta', 'alpha', 'mid'] == list(table)
  assert list(table.items()) == [('zeta', 1), ('alpha', 2), ('mid', 3)]
  assert len(table) == 3 and 'alpha' in table and 'beta' not in table
  assert table.get('alpha') == table['alpha'] == 2


def test_a_name_registered_twice_is_refused_and_the_first_entry_kept():
  table = _table(alpha=1)
  with pytest.raises(RegistryError, match=r"widget 'alpha' is registered twice"):
    table.add('alpha', 2)
  with pytest.raises(RegistryError, match='registered twice'):
    table.register('alpha')(type('Other', (), {}))
  assert table['alpha'] == 1 and len(table) == 1


def test_an_unknown_name_names_the_config_key_and_the_choices():
  table = _table(alpha=1, beta=2)
  message = r"config\.model\.widget has 'gamma', which is not a registered widget; valid choices: \['alpha', 'beta'\]"
  for lookup in (table.get, table.check, table.__getitem__):
    with pytest.raises(RegistryError, match=message):
      lookup('gamma')
  assert issubclass(RegistryError, ValueError)  # config validation catches ValueErrors
  table.check('alpha')  # a registered name passes


def test_get_returns_the_default_for_an_unknown_name_only():
  table = _table(alpha=1)
  assert table.get('gamma', None) is None
  assert table.get('gamma', 'fallback') == 'fallback'
  assert table.get('alpha', 'fallback') == 1


def test_register_adds_the_entry_and_names_a_class():
  table = Registry('widget', 'model.widget')

  @table.register('square')
  class Square:
    name = ''

  @table.register('circle')
  def circle():
    return 'round'

  assert table['square'] is Square and Square.name == 'square'
  assert table['circle'] is circle and circle() == 'round' and not hasattr(circle, 'name')  # functions stay as they are
  assert table.names() == ['square', 'circle']


def test_check_choice_names_the_key_and_the_choices():
  check_choice('data.mixing', 'mixed', ('mixed', 'weighted'))
  with pytest.raises(RegistryError, match=r"config\.data\.mixing='random' is not valid; valid choices: "
                                          r"\['mixed', 'weighted'\]"):
    check_choice('data.mixing', 'random', ('mixed', 'weighted'))


def test_mapping_style_writes_swap_an_entry_in_and_out():
  table = _table(alpha=1)
  table['alpha'] = 10  # replaces, unlike `add`
  table['beta'] = 2
  assert list(table.items()) == [('alpha', 10), ('beta', 2)]
  del table['beta']
  assert table.names() == ['alpha']
  with pytest.raises(KeyError):
    del table['beta']
  with pytest.MonkeyPatch.context() as patch:  # as the tests that stub an entry do
    patch.setitem(table, 'alpha', 100)
    patch.setitem(table, 'gamma', 3)
    assert table['alpha'] == 100 and table['gamma'] == 3
  assert list(table.items()) == [('alpha', 10)]


@pytest.fixture
def widget_package(tmp_path, monkeypatch):
  """A package on sys.path whose __init__ holds a registry of its own modules, and two modules that register into
  it; the package's modules are dropped from sys.modules afterwards."""
  name = f'registry_test_widgets_{tmp_path.name}'.replace('-', '_')
  root = tmp_path / name
  root.mkdir()
  (root / '__init__.py').write_text(
      f"from vlp_jax.registry import Registry\nWIDGETS = Registry('widget', 'model.widget', package={name!r})\n")
  for module, entry in (('round_widgets', 'circle'), ('square_widgets', 'square')):
    (root / f'{module}.py').write_text(textwrap.dedent(f"""\
        from {name} import WIDGETS

        @WIDGETS.register({entry!r})
        class Widget:
          pass
        """))
  monkeypatch.syspath_prepend(str(tmp_path))
  yield name
  for module in [m for m in sys.modules if m == name or m.startswith(f'{name}.')]:
    del sys.modules[module]


@pytest.mark.parametrize('first_read', ['names', 'get', 'contains', 'len', 'iter', 'items', 'setitem'])
def test_a_package_registry_imports_its_modules_on_the_first_read(widget_package, first_read):
  package = __import__(widget_package)
  table = package.WIDGETS
  modules = {f'{widget_package}.round_widgets', f'{widget_package}.square_widgets'}
  assert not modules & set(sys.modules)  # importing the package alone registers nothing
  reads = {'names': table.names, 'get': lambda: table.get('circle'), 'contains': lambda: 'circle' in table,
           'len': lambda: len(table), 'iter': lambda: list(table), 'items': lambda: list(table.items()),
           'setitem': lambda: table.__setitem__('triangle', object())}
  reads[first_read]()
  assert modules <= set(sys.modules)
  assert {'circle', 'square'} <= set(table.names())
  assert table['circle'].name == 'circle' and table['square'].name == 'square'
  assert table['circle'].__module__ == f'{widget_package}.round_widgets'


def test_discovery_runs_once_and_keeps_entries_added_before_it(widget_package):
  table = __import__(widget_package).WIDGETS
  table.add('early', 0)  # `add` does not discover: a module may register while the package is being imported
  assert table.names() == ['early', 'circle', 'square']  # pkgutil lists the modules sorted by name
  del sys.modules[f'{widget_package}.round_widgets']  # imported again, it would register 'circle' twice
  table.add('late', 1)
  assert table.names() == ['early', 'circle', 'square', 'late']
  assert f'{widget_package}.round_widgets' not in sys.modules


def test_a_registry_without_a_package_imports_nothing(monkeypatch):
  imported = []
  monkeypatch.setattr('importlib.import_module', lambda name: imported.append(name))
  table = _table(alpha=1)
  assert table.names() == ['alpha'] and 'beta' not in table
  assert imported == []
