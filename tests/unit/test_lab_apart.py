"""The library and its own tests never import the lab (lab/): the lab depends on the library's public commands and
API, not the other way round, and `python -m pytest -m "not lab"` runs without it. So does benchmarks/, which the
lab's report reads."""
import ast
import os

from support import ROOT

APART = ('vlp_jax', 'benchmarks', 'tests')  # trees whose files may not import lab, tests/lab/ excepted
LAB_TESTS = os.path.join('tests', 'lab')


def lab_imports(source: str) -> list[str]:
  """The modules of `lab` that `source` imports, by name."""
  found = []
  for node in ast.walk(ast.parse(source)):
    names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
             else [node.module or ''] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
    found += [name for name in names if name == 'lab' or name.startswith('lab.')]
  return found


def test_the_detector_finds_every_form_of_import():
  assert lab_imports('import lab\nfrom lab import report\nfrom lab.catalogue import RUNS\nimport lab.runner as r\n') \
      == ['lab', 'lab', 'lab.catalogue', 'lab.runner']
  assert lab_imports('import labels\nfrom vlp_jax import lab_free\nfrom . import lab\n') == []


def test_no_file_of_the_library_its_tests_or_the_benchmarks_imports_the_lab():
  offenders = []
  for top in APART:
    for directory, _, files in os.walk(os.path.join(ROOT, top)):
      relative = os.path.relpath(directory, ROOT)
      if relative == LAB_TESTS or relative.startswith(LAB_TESTS + os.sep):
        continue
      for name in files:
        if name.endswith('.py'):
          with open(os.path.join(directory, name)) as f:
            if lab_imports(f.read()):
              offenders.append(os.path.join(relative, name))
  assert offenders == []
