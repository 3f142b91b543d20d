"""Helpers shared by the benchmark scripts."""
from __future__ import annotations


def compiled_memory(compiled) -> dict[str, int]:
  """Per-device memory of a compiled XLA program from its memory analysis.

  peak_bytes = arguments + outputs not aliased to (donated) arguments + temporaries. XLA's own
  `peak_memory_in_bytes` leaves the temporaries out on CPU, and they are exactly what activations, logit matrices
  and accumulation change.
  """
  m = compiled.memory_analysis()
  args, out, alias, temp = (int(m.argument_size_in_bytes), int(m.output_size_in_bytes), int(m.alias_size_in_bytes),
                            int(m.temp_size_in_bytes))
  return {'peak_bytes': args + out - alias + temp, 'argument_bytes': args, 'temp_bytes': temp}
