"""Training curves as a PNG beside metrics.jsonl: the loss, and the eval scores against their chance levels."""
from __future__ import annotations

import os

from vlp_jax.training.writer import read_metrics


def _series(records: list[dict], name: str) -> tuple[list[int], list[float]]:
  points = [(r['step'], r[name]) for r in records if name in r]
  return [p[0] for p in points], [p[1] for p in points]


def plot_curves(workdir: str) -> str | None:
  """Write `workdir/curves.png` from metrics.jsonl; returns its path, or None when there is nothing to plot."""
  records = read_metrics(workdir)
  if not any('train/loss' in r for r in records):
    return None
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  datasets = sorted({k.split('/')[1] for r in records for k in r if k.startswith('eval/')})
  fig, axes = plt.subplots(1, 1 + len(datasets), figsize=(5 * (1 + len(datasets)), 3.8), squeeze=False)
  axes = axes[0]
  axes[0].plot(*_series(records, 'train/loss'), label='train/loss')
  axes[0].set(xlabel='step', ylabel='loss', title='training loss')
  axes[0].legend()
  for ax, dataset in zip(axes[1:], datasets):
    for metric, chance in (('zeroshot_top1', 'zeroshot_chance'), ('i2t_r1', 'i2t_r1_chance'),
                           ('t2i_r1', 't2i_r1_chance'), ('affinity_consistency', '')):
      steps, values = _series(records, f'eval/{dataset}/{metric}')
      if not steps:
        continue
      line, = ax.plot(steps, values, marker='o', label=metric)
      _, chances = _series(records, f'eval/{dataset}/{chance}') if chance else ([], [])
      if chances:
        ax.axhline(chances[-1], color=line.get_color(), linestyle=':', linewidth=1)
    ax.set(xlabel='step', ylabel='score', title=f'{dataset} (dotted: chance)', ylim=(0, None))
    ax.legend()
  fig.tight_layout()
  path = os.path.join(workdir, 'curves.png')
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path
