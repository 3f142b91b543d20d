"""Check that every run of lab/catalogue.py trains exactly the config it trained before the experiments moved out of
configs/experiments/ (one file per run, their table metadata parsed from the source):

  python -m lab.config_check [--ref=e9560bf]

At REF a run NAME was configs/NAME_shapes.py if that file existed, else configs/experiments/NAME.py. Each is loaded
from a `git archive` of REF's configs/ and compared with the catalogue's config (`config.to_dict()`, every value's type
included); prints each run that differs and exits 1 if any does.
"""
from __future__ import annotations

import argparse
import copy
import io
import os
import subprocess
import sys
import tarfile
import tempfile

from lab.catalogue import ROOT, RUNS, load_config
from vlp_jax.config import from_file

BEFORE_THE_MOVE = 'e9560bf'  # the last commit with configs/experiments/
# Keys changed on purpose since the move, which the check leaves out: what is evaluated, not what is trained (issue
# 64 added the novel test subsets to configs/shapes_base.py's eval sets).
CHANGED_SINCE_THE_MOVE = ('eval.datasets',)
# runs added to the catalogue after the move: they had no config at BEFORE_THE_MOVE, so there is nothing to compare
ADDED_AFTER_THE_MOVE = ('siglip2_boxes_decoder', 'siglip2_boxes_decoder_shuffled')


def canonical(tree) -> str:
  """A config's `to_dict()` as text, keys sorted and values by repr, so that 0 and 0.0 or a tuple and a list differ."""
  if isinstance(tree, dict):
    return '{' + ', '.join(f'{key!r}: {canonical(tree[key])}' for key in sorted(tree)) + '}'
  return repr(tree)


def config_at(root: str, name: str):
  """Run `name`'s config in the tree `root` of the old layout."""
  shipped = os.path.join(root, 'configs', f'{name}_shapes.py')
  return from_file(shipped if os.path.exists(shipped) else os.path.join(root, 'configs', 'experiments', f'{name}.py'))


def without(tree: dict, keys=CHANGED_SINCE_THE_MOVE) -> dict:
  """`tree` (a config's to_dict()) without the dotted `keys`."""
  tree = copy.deepcopy(tree)
  for key in keys:
    *path, leaf = key.split('.')
    node = tree
    for part in path:
      node = node.get(part, {})
    node.pop(leaf, None)
  return tree


def differing_runs(ref: str = BEFORE_THE_MOVE) -> list[str]:
  """The runs whose config now differs from the one at `ref`, CHANGED_SINCE_THE_MOVE and ADDED_AFTER_THE_MOVE
  left out."""
  archive = subprocess.run(['git', 'archive', ref, 'configs'], cwd=ROOT, capture_output=True, check=True).stdout
  with tempfile.TemporaryDirectory() as old:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
      tar.extractall(old)
    return [name for name in RUNS if name not in ADDED_AFTER_THE_MOVE
            and canonical(without(config_at(old, name).to_dict())) != canonical(without(load_config(name).to_dict()))]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--ref', default=BEFORE_THE_MOVE, help='the commit of the old layout')
  ref = parser.parse_args().ref
  differing = differing_runs(ref)
  for name in differing:
    print(f'{name}: its config differs from the one at {ref}')
  checked = len(RUNS) - len(ADDED_AFTER_THE_MOVE)
  print(f'{checked - len(differing)} of {checked} runs train the config they trained at {ref} '
        f'({len(ADDED_AFTER_THE_MOVE)} added since: {", ".join(ADDED_AFTER_THE_MOVE)}).')
  sys.exit(1 if differing else 0)


if __name__ == '__main__':
  main()
