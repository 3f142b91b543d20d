"""Install files: requirements.txt lists exactly pyproject.toml's runtime dependencies, the accelerator extras use the
jax dependency's range, and `import vlp_jax` stays cheap."""
import os
import re
import subprocess
import sys
import tomllib

from support import ROOT


def normalize_requirement(line: str) -> str:
  """'Scikit_Learn >= 1.5, <2' -> 'scikit-learn>=1.5,<2': whitespace removed, the name (and extras) lower-cased with
  runs of '-', '_' and '.' as one '-' (PEP 503), the version specifier kept as written."""
  compact = ''.join(line.split())
  match = re.match(r'^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?(.*)$', compact)
  if not match:
    raise ValueError(f'{line!r} is not a requirement of the form name[extras]specifier')
  name, extras, specifier = match.groups()
  name = re.sub(r'[-_.]+', '-', name).lower()
  return f'{name}{(extras or "").lower()}{specifier}'


def requirements_file_lines(text: str) -> list[str]:
  """The requirements of a requirements.txt: comments (whole-line and trailing) and blank lines dropped."""
  lines = [line.split(' #', 1)[0].strip() for line in text.splitlines()]
  return [line for line in lines if line and not line.startswith('#')]


def _pyproject() -> dict:
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)


def test_normalize_requirement_ignores_spacing_and_name_case_only():
  assert normalize_requirement(' Scikit_Learn >= 1.5, <2 ') == 'scikit-learn>=1.5,<2'
  assert normalize_requirement('JAX[CPU]>=0.10,<0.11') == 'jax[cpu]>=0.10,<0.11'
  assert normalize_requirement('jax>=0.10,<0.11') != normalize_requirement('jax>=0.10,<0.12')
  assert requirements_file_lines('# header\n\nnumpy>=2  # why\n  \n') == ['numpy>=2']


def test_requirements_txt_matches_pyproject_dependencies():
  with open(os.path.join(ROOT, 'requirements.txt'), encoding='utf-8') as f:
    from_requirements = [normalize_requirement(r) for r in requirements_file_lines(f.read())]
  from_pyproject = [normalize_requirement(r) for r in _pyproject()['project']['dependencies']]
  assert len(from_requirements) == len(set(from_requirements)), 'requirements.txt lists a package twice'
  only_requirements = sorted(set(from_requirements) - set(from_pyproject))
  only_pyproject = sorted(set(from_pyproject) - set(from_requirements))
  assert not only_requirements and not only_pyproject, (
      f'requirements.txt and pyproject.toml [project] dependencies differ: only in requirements.txt '
      f'{only_requirements}, only in pyproject.toml {only_pyproject}')


def test_accelerator_extras_use_the_jax_dependency_range():
  project = _pyproject()['project']
  jax_dependency = next(normalize_requirement(r) for r in project['dependencies']
                        if normalize_requirement(r).startswith('jax['))
  jax_range = jax_dependency.split(']', 1)[1]
  extras = project['optional-dependencies']
  assert [normalize_requirement(r) for r in extras['cuda12']] == [f'jax[cuda12]{jax_range}']
  assert [normalize_requirement(r) for r in extras['tpu']] == [f'jax[tpu]{jax_range}']


def test_import_vlp_jax_does_not_import_jax():
  """`vlp_jax.load` imports its dependencies when called, so `import vlp_jax` (and `--help`s) stay fast."""
  code = ('import sys, vlp_jax; assert callable(vlp_jax.load); '
          'print(sorted(m for m in ("jax", "flax", "orbax") if m in sys.modules))')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, 'PYTHONPATH': ROOT})
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.strip() == '[]'
