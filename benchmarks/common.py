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


PRECISIONS = {'fp32': 'float32', 'bf16': 'bfloat16'}


def build_config(model: str, batch_size: int, objective: str, precision: str, remat: bool, patch_dropout: float = 0.0,
                 scan_layers: bool = False):
  import ml_collections
  from vlp_jax import models, objectives
  from vlp_jax.config import base_config, validate, with_term
  config = base_config()
  config.batch_size = batch_size
  config.model = models.preset(model)
  if precision not in PRECISIONS:
    raise ValueError(f"--precision has '{precision}'; valid choices: {list(PRECISIONS)}")
  config.model.dtype = PRECISIONS[precision]
  config.model.remat = remat
  config.model.scan_layers = scan_layers
  if patch_dropout:
    config.model.vision.patch_dropout = patch_dropout
  if objective in objectives.TERMS:
    config = with_term(config, objective)
  else:
    config.objective = ml_collections.ConfigDict({'name': objective, 'terms': ()})
  if objective == 'cosmos':  # local crops keep COSMOS's 96 / 224 ratio at other image sizes (a patch multiple)
    v = config.model.vision
    config.objective.local_crop_size = max(v.patch_size, round(v.image_size * 96 / 224 / v.patch_size) * v.patch_size)
  validate(config, num_devices=1)
  return config


def real_batch(config, batch_size: int) -> dict:
  """The objective's views of a few embedded-dataset examples at the model's image size, tiled to `batch_size`."""
  import numpy as np
  from vlp_jax import objectives
  from vlp_jax.data import pipeline, records, synthetic
  views = objectives.OBJECTIVES.get(config.objective.name).views(config)
  size = config.model.vision.image_size
  rng = np.random.default_rng(0)
  examples = [views.random_map(pipeline.DecodeRecord().map(records.serialize(
      synthetic.make_example(0, 'train', synthetic.SOURCES[i % 3], i, size))), rng) for i in range(8)]
  return {k: np.stack([examples[i % len(examples)][k] for i in range(batch_size)]) for k in examples[0]}
