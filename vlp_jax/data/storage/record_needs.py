"""What an objective reads from its training records beyond the image and the caption (COSMOS's long captions, the
LocCa location tasks' regions), and the check of a sample of records against it.

Each registered objective (and term) declares its needs (`Objective.record_needs`); the trainer reads a few records
of the training data before anything compiles (training/start_checks.py) and refuses, naming the field, what needs
it and what to do, data that lacks what the run would otherwise silently train without: COSMOS's text crops fall
back to the short caption, and a location task without regions trains nothing at full cost.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from vlp_jax.data.storage.records import Regions


@dataclasses.dataclass(frozen=True)
class RecordNeed:
  """A record field a setting reads.

  field: the record field ('long_caption', 'regions').
  needed_by: the setting that reads it, as the user would write it ("config.objective.name='cosmos'").
  fix: what to do when the data lacks it (prepare other data, or the setting that does without it).
  min_fraction: the fraction of the sampled records that must carry it; 0 asks for at least one (a field only some
    records carry, as regions are).
  """
  field: str
  needed_by: str
  fix: str
  min_fraction: float = 1.0

  def required(self, sampled: int) -> int:
    """How many of `sampled` records must carry the field: ceil(min_fraction * sampled), at least 1."""
    return max(1, math.ceil(self.min_fraction * sampled - 1e-9))


def carries(example: dict[str, Any], field: str) -> bool:
  """Whether a record's `field` holds something: non-blank text, a non-empty list of regions (raw or decoded)."""
  value = example.get(field)
  if value is None:
    return False
  if isinstance(value, (str, bytes)):
    return bool(value.strip())
  if isinstance(value, Regions):
    return len(value.texts) > 0
  try:
    return len(value) > 0
  except TypeError:  # a number or other scalar: present
    return True


def unmet_needs(needs: Sequence[RecordNeed], examples: Sequence[dict[str, Any]], where: str) -> list[str]:
  """One line per need that fewer than `need.required(len(examples))` of the examples carry, each naming the field,
  the count, the setting and the fix; [] when every need is met or there are no examples (nothing to judge by).
  where: which records were read, for the message."""
  if not examples:
    return []
  lines = []
  for need in dict.fromkeys(needs):  # a need declared twice is reported once
    have, wanted = sum(carries(e, need.field) for e in examples), need.required(len(examples))
    if have < wanted:
      lines.append(f"{need.needed_by} needs the records' '{need.field}', and {have} of the {len(examples)} records "
                   f'read ({where}) carry it ({wanted} needed): {need.fix}')
  return lines
