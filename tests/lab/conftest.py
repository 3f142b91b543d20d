"""The lab's tests (lab/: the methods harness, its report and diagnostics) are one marked group, `lab`: `python -m
pytest -m "not lab"` runs the library's suite alone. Those under integration/ start training or subprocesses, and are
marked slow as well."""
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
  for item in items:
    path = os.path.abspath(str(item.path))
    if path.startswith(_HERE + os.sep):
      item.add_marker(pytest.mark.lab)
      if path.startswith(os.path.join(_HERE, 'integration') + os.sep):
        item.add_marker(pytest.mark.slow)
