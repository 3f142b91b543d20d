"""The converter's output folder and its manifest, `convert_manifest.json`: the inputs (path, size and mtime of each
index file) and the options of the conversion that wrote the shards beside it. The same conversion again is a no-op
(`prepare_output` returns its saved summary); a different one replaces only the earlier conversion's files, and only
with --overwrite.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from typing import Any

from vlp_jax.data.ingest.input_format import ConvertError, Options
from vlp_jax.data.storage.shard_writer import is_shard_file, publish

MANIFEST = 'convert_manifest.json'
MANIFEST_VERSION = 1  # bump when the records a conversion writes change, so old manifests no longer match


def fingerprint_of(files: list[str], options: Options) -> dict[str, Any]:
  """The inputs (absolute path, size, mtime of each index file) and the options that shape the output."""
  inputs = []
  for path in files:
    stat = os.stat(path)
    inputs.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
  return json.loads(json.dumps({'version': MANIFEST_VERSION, 'options': dataclasses.asdict(options), 'inputs': inputs}))


def _read_manifest(directory: str) -> dict[str, Any] | None:
  """The manifest of an earlier conversion into `directory`; {} when one is there but unreadable."""
  path = os.path.join(directory, MANIFEST)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      manifest = json.load(f)
    return manifest if isinstance(manifest, dict) else {}
  except (OSError, ValueError):
    return {}


def _shards_intact(directory: str, manifest: dict[str, Any]) -> bool:
  try:
    return all(os.path.getsize(os.path.join(directory, s['name'])) == s['size'] for s in manifest['shards'])
  except (OSError, KeyError, TypeError):
    return False


def _write_json(path: str, value: Any) -> None:
  tmp = f'{path}.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=1)
    f.write('\n')
  os.replace(tmp, path)


def prepare_output(output: str, fingerprint: dict[str, Any], prefix: str, overwrite: bool
                   ) -> tuple[dict[str, Any] | None, list[str]]:
  """-> (the saved summary when `output` already holds this very conversion, else None; the files of ours to remove
  once the new shards are ready). Raises ConvertError when `output` holds other shards and not `overwrite`."""
  manifest = _read_manifest(output) if os.path.isdir(output) else None
  if manifest is not None and manifest.get('fingerprint') == fingerprint and _shards_intact(output, manifest):
    return manifest['summary'], []
  if os.path.exists(output) and not os.path.isdir(output):
    raise ConvertError(f'--output {output} is a file; it must be a folder (or not exist yet)')
  try:
    os.makedirs(output, exist_ok=True)
    with tempfile.TemporaryFile(dir=output):
      pass
  except OSError as error:
    raise ConvertError(f'--output {output} is not writable: {error.strerror or error}') from error
  names = sorted(os.listdir(output))
  shards = [n for n in names if n.endswith('.array_record')]
  same = manifest is not None and manifest.get('fingerprint') == fingerprint  # the same conversion, left damaged
  if (shards or manifest is not None) and not same and not overwrite:
    what = 'a different conversion (its convert_manifest.json does not match)' if manifest is not None else (
        f'ArrayRecord files from elsewhere ({", ".join(shards[:3])}{", ..." if len(shards) > 3 else ""})')
    raise ConvertError(f'--output {output} already holds {what}. Pass --overwrite to replace the shards of the '
                       'earlier conversion (only its shards and manifest are removed), or choose another --output.')
  old_prefix = (manifest or {}).get('fingerprint', {}).get('options', {}).get('prefix', prefix)
  listed = {s.get('name') for s in (manifest or {}).get('shards', []) if isinstance(s, dict)}
  ours = [n for n in names if n in listed or is_shard_file(n, (prefix, old_prefix))]
  foreign = [n for n in shards if n not in ours]
  if foreign:
    print(f'convert: warning: {output} also holds {len(foreign)} ArrayRecord files this converter did not write '
          f'({", ".join(foreign[:3])}); they are kept, and training on the folder reads them too', file=sys.stderr)
  for name in ours:  # leftover temporary shards of a crashed run go now; old shards once the new ones are ready
    if name.endswith('.tmp'):
      os.remove(os.path.join(output, name))
  return None, ([MANIFEST] if manifest is not None else []) + [n for n in ours if not n.endswith('.tmp')]


def finish(output: str, prefix: str, temporary: list[str], old_files: list[str], manifest: dict[str, Any]) -> None:
  """Replaces an earlier conversion's files by the new shards (renamed into place) and writes `manifest` last, with
  the shards' names and sizes."""
  for name in old_files:  # the old manifest goes first: a crash from here on never leaves a manifest that lies
    os.remove(os.path.join(output, name))
  paths = publish(temporary, output, prefix)
  manifest['shards'] = [{'name': os.path.basename(p), 'size': os.path.getsize(p)} for p in paths]
  _write_json(os.path.join(output, MANIFEST), manifest)
