"""'synthetic': the embedded dataset (procedurally rendered shape scenes with captions,
data/sources/synthetic_shapes.py), generated on first use into `config.data.cache_dir`; options under
`config.data.synthetic`."""
from __future__ import annotations

from typing import Any

import ml_collections

from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.formats import DATA_FORMATS, TrainingData
from vlp_jax.errors import ConfigError
from vlp_jax.registry import check_choice


@DATA_FORMATS.register('synthetic')
class EmbeddedData(TrainingData):
  """Splits 'train', 'val' and 'test', each source in its own shards."""
  reads_path = False  # generated into config.data.cache_dir

  @classmethod
  def carries_regions(cls, data: ml_collections.ConfigDict) -> bool:
    return bool(data.synthetic.regions)

  @classmethod
  def default_config(cls) -> dict[str, Any]:
    return {
        'seed': 0, 'resolution': 32, 'num_train': 10000, 'num_val': 500, 'num_test': 500,
        'sources': synthetic.SOURCES, 'shards': 2,
        # 'alt_text' | 'detailed' (every object named in every source: few repeated captions) | 'colour_only' (no
        # shape ever named); data/sources/synthetic_shapes.py
        'captions': 'alt_text',
        # 'full' (the default: 17 to 67 tokens, cut at a 32-token context) | 'compact' (at most 32 tokens with
        # sot/eot, the same kinds of sentence); data/sources/synthetic_shapes.py
        'long_captions': 'full',
        # each object's box and description in the records (`regions`), for LocCa's location tasks; off keeps the
        # cache of before the field existed
        'regions': False,
        # a control: each train record carries another train record's regions (a fixed derangement by seed; the
        # eval sets keep their own), so that the location tasks learn boxes that are not in the image
        'shuffle_regions': False,
    }

  @classmethod
  def validate(cls, data: ml_collections.ConfigDict) -> None:
    s = data.synthetic
    for key in ('resolution', 'num_train', 'num_val', 'num_test', 'shards'):
      value = s[key]
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'config.data.synthetic.{key} must be a positive integer, got {value!r}')
    check_choice('data.synthetic.captions', s.captions, synthetic.CAPTION_STYLES)
    check_choice('data.synthetic.long_captions', s.long_captions, synthetic.LONG_CAPTION_STYLES)
    for source in s.sources:
      check_choice('data.synthetic.sources', source, synthetic.SOURCES)
    if not isinstance(s.shuffle_regions, bool):
      raise ConfigError(f'config.data.synthetic.shuffle_regions must be True or False, got {s.shuffle_regions!r}')
    if s.shuffle_regions and not s.regions:
      raise ConfigError('config.data.synthetic.shuffle_regions=True shuffles the records\' regions, but '
                        'config.data.synthetic.regions is False: there are none. Set config.data.synthetic.regions='
                        'True, or drop shuffle_regions')
    if s.shuffle_regions and s.num_train < 2:
      raise ConfigError(f'config.data.synthetic.shuffle_regions=True gives each train record another record\'s '
                        f'regions, but config.data.synthetic.num_train={s.num_train}: use at least 2')

  def split_paths(self, split: str) -> list[str]:
    return synthetic.config_split_paths(self.data, split)
