"""The package's imports flow one way (docs/architecture.md): read from the source with ast, imports inside
functions included, there is no cycle between modules, and each layer imports only the layers below it."""
from __future__ import annotations

import ast
import functools
import os

import pytest

from support import ROOT

PACKAGE = 'vlp_jax'
# Top to bottom; a module may import its own layer's modules and those of every layer below. The entry modules at the
# package root (main.py, ...) and the package itself are above everything.
LAYERS = (
    ('cli',),
    ('inference', 'interchange'),
    ('training',),
    ('config',),
    # Gradient accumulation: config validation checks its modes, and it splits the objectives' interface.
    ('accumulation',),
    ('objectives',),
    ('evaluation',),
    ('evalsets',),
    ('data', 'losses', 'models'),
    ('checkpoint_files', 'errors', 'parallel', 'hardware'),
    ('registry', 'paths'),
)
ENTRY_MODULES = ('main', 'evaluate', 'embed', 'weights', 'convert', 'clip_benchmark')


def module_files(root: str = ROOT) -> dict[str, str]:
  """{'vlp_jax.data.loading.pipeline': path, ...}; a package's __init__.py is the package's own name."""
  out = {}
  for directory, _, files in os.walk(os.path.join(root, PACKAGE)):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(directory, name)
        dotted = os.path.relpath(path, root)[:-3].replace(os.sep, '.')
        out[dotted.removesuffix('.__init__')] = path
  return out


def imported_modules(name: str, path: str, known: set[str]) -> set[str]:
  """The package's modules that `name` imports anywhere in its source (relative imports resolved): for
  `from a import b`, module a.b when it exists, else a."""
  package = name if path.endswith('__init__.py') else name.rpartition('.')[0]
  found = set()
  for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
    if isinstance(node, ast.Import):
      targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        parts = package.split('.')[:len(package.split('.')) - node.level + 1]
        base = '.'.join(parts + ([node.module] if node.module else []))
      targets = [f'{base}.{alias.name}' if f'{base}.{alias.name}' in known else base for alias in node.names]
    else:
      continue
    for target in targets:
      while target and target not in known:  # a name inside a module: its module
        target = target.rpartition('.')[0]
      if target and target != name:
        found.add(target)
  return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
  files = module_files()
  return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One cycle [a, b, ..., a] of a directed graph, or None (depth-first search with three colours)."""
  state, stack = {}, []

  def visit(node):
    state[node] = 'open'
    stack.append(node)
    for child in sorted(graph.get(node, ())):
      if state.get(child) == 'open':
        return stack[stack.index(child):] + [child]
      if child not in state and (cycle := visit(child)):
        return cycle
    state[node] = 'done'
    stack.pop()
    return None

  for node in sorted(graph):
    if node not in state and (cycle := visit(node)):
      return cycle
  return None


def unit(module: str) -> str:
  """The layer unit of a module: its top-level subpackage or root module ('vlp_jax.data.loading.pipeline' ->
  'data')."""
  return module.split('.')[1] if module != PACKAGE else PACKAGE


def folded(graph: dict[str, set[str]]) -> dict[str, set[str]]:
  out = {}
  for module, targets in graph.items():
    out.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) != unit(module))
  return out


def test_find_cycle_finds_one_and_only_one():
  assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': set()}) is None
  assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']


def test_imports_are_read_inside_functions_and_relative(tmp_path):
  source = tmp_path / 'm.py'
  source.write_text('from . import sibling\n\ndef f():\n  from vlp_jax.data.loading import pipeline\n'
                    '  import vlp_jax.errors\n')
  known = {'vlp_jax.x', 'vlp_jax.x.m', 'vlp_jax.x.sibling', 'vlp_jax.data', 'vlp_jax.data.loading',
           'vlp_jax.data.loading.pipeline', 'vlp_jax.errors'}
  assert imported_modules('vlp_jax.x.m', str(source), known) == {
      'vlp_jax.x.sibling', 'vlp_jax.data.loading.pipeline', 'vlp_jax.errors'}


def test_no_module_imports_itself_back():
  assert find_cycle(import_graph()) is None


def test_no_subpackage_imports_itself_back():
  assert find_cycle(folded(import_graph())) is None


@pytest.mark.parametrize('module', sorted(module_files()))
def test_each_module_imports_only_its_layer_and_below(module):
  rank = {name: depth for depth, layer in enumerate(LAYERS) for name in layer}
  source = unit(module)
  if source == PACKAGE or source in ENTRY_MODULES:
    return  # the package and the entry modules sit on top
  assert source in rank, f'{module}: add its unit {source!r} to LAYERS (and docs/architecture.md)'
  upward = sorted(t for t in import_graph()[module] if unit(t) != source and rank.get(unit(t), -1) < rank[source])
  assert not upward, f'{module} (layer {source}) imports from a layer above it: {upward}'


# Inside data/, its parts by job (vlp_jax/data/__init__.py), top to bottom as LAYERS: a module imports its own part's
# modules and those of the parts below it.
DATA_PARTS = (
    ('formats', 'ingest'),
    ('loading',),
    ('sources', 'text'),
    ('image', 'storage'),
)


def data_part(module: str) -> str:
  """'vlp_jax.data.loading.pipeline' -> 'loading'; '' for what is not inside a part of data."""
  parts = module.split('.')
  return parts[2] if len(parts) > 3 and parts[1] == 'data' else ''


@pytest.mark.parametrize('module', sorted(m for m in module_files() if data_part(m)))
def test_each_data_module_imports_only_its_part_and_below(module):
  rank = {name: depth for depth, layer in enumerate(DATA_PARTS) for name in layer}
  source = data_part(module)
  assert source in rank, f'{module}: add its part {source!r} of data/ to DATA_PARTS (and vlp_jax/data/__init__.py)'
  upward = sorted(t for t in import_graph()[module]
                  if data_part(t) and data_part(t) != source and rank.get(data_part(t), -1) < rank[source])
  assert not upward, f'{module} (data part {source}) imports from a part above it: {upward}'
