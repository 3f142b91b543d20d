"""What the loop prints: the step rate and ETA (`Progress`), the progress line of a logged step, and the tables of
eval metrics."""
from __future__ import annotations

import time

from vlp_jax.evaluation.results import summary_lines


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f'{hours}h{rest // 60:02d}m{rest % 60:02d}s' if hours else f'{rest // 60}m{rest % 60:02d}s'


class Progress:
  """Step rate and ETA over the training steps only (evaluation and checkpoint time excluded), and where the host's
  time goes: waiting for the input pipeline (`waited_for_data`) or for the devices' results (`waited_for_device`).
  The loop dispatches step n + 1 before it reads step n's results, so device time that is not waited for overlaps
  the input pipeline and the host's work. `device_flops`: one step's floating-point operations on one of the
  `devices` devices (XLA's count, training/step.py), which adds the step's FLOPs and the achieved TFLOP/s per device
  to every tick; with `peak_flops`, the device's peak FLOP/s (`hardware.peak_device_flops`), the MFU too, of the
  architecture's FLOPs per step and device (`architecture_flops`, training/flops.py) and of the executed ones."""

  def __init__(self, total_steps: int, batch_size: int, start_step: int, device_flops: float | None = None,
               devices: int = 1, peak_flops: float | None = None, architecture_flops: float | None = None):
    self.total_steps, self.batch_size = total_steps, batch_size
    self.device_flops, self.devices, self.peak_flops = device_flops, devices, peak_flops
    self.architecture_flops = architecture_flops
    self.last_step, self.last_time, self.train_seconds, self.train_steps = start_step, time.perf_counter(), 0.0, 0
    self.data_seconds = self.device_seconds = 0.0

  def waited_for_data(self, seconds: float) -> None:
    self.data_seconds += seconds

  def waited_for_device(self, seconds: float) -> None:
    self.device_seconds += seconds

  def pause(self) -> None:
    self.paused_at = time.perf_counter()

  def resume(self) -> None:
    self.last_time += time.perf_counter() - self.paused_at

  def tick(self, step: int) -> dict[str, float]:
    """Throughput since the last tick; {} when no step has been timed yet."""
    now = time.perf_counter()
    seconds, steps = now - self.last_time, step - self.last_step
    if steps == 0:
      return {}
    self.last_step, self.last_time = step, now
    self.train_seconds += seconds
    self.train_steps += steps
    rate = steps / max(seconds, 1e-9)
    mean_rate = self.train_steps / max(self.train_seconds, 1e-9)
    waits = {'perf/data_wait_fraction': self.data_seconds / max(seconds, 1e-9),
             'perf/device_wait_fraction': self.device_seconds / max(seconds, 1e-9)}
    self.data_seconds = self.device_seconds = 0.0
    return {'perf/samples_per_sec': rate * self.batch_size, 'perf/steps_per_sec': rate,
            'perf/step_seconds': seconds / steps, **waits,
            'perf/eta_seconds': (self.total_steps - step) / max(mean_rate, 1e-9), **self.utilisation(rate)}

  def utilisation(self, steps_per_sec: float) -> dict[str, float]:
    """The executed FLOPs of one step on all devices (`perf/step_flops`), the TFLOP/s per device they make at
    `steps_per_sec`, and, where the device's peak is known, the model FLOPs utilisation (a fraction, 0.413 = 41.3%)
    against the dense bf16 peak whatever the compute dtype (as maxtext and PaLM report it). `perf/mfu`: PaLM's MFU,
    the architecture's FLOPs per second and device (every row through every block, no recomputation) / the peak.
    `perf/mfu_executed`: the executed FLOPs (the step's own count: a pooled tower's last block computes one row,
    model.remat's recomputation counts as work) / the peak; with remat this is nearer PaLM's hardware FLOPs
    utilisation. Before issue 65, `perf/mfu` was the executed figure."""
    if not self.device_flops:
      return {}
    achieved = self.device_flops * steps_per_sec
    mfu = {}
    if self.peak_flops:
      mfu['perf/mfu_executed'] = achieved / self.peak_flops
      if self.architecture_flops:
        mfu['perf/mfu'] = self.architecture_flops * steps_per_sec / self.peak_flops
    return {'perf/step_flops': self.device_flops * self.devices, 'perf/device_tflops_per_sec': achieved / 1e12,
            **mfu}


def progress_line(step: int, total_steps: int, metrics: dict[str, float]) -> str:
  """`step 4/6 | loss 3.4222 | 190.1 samples/s | ETA 0m00s` from a logged step's metrics ('compiling' in place of
  the rate while no step has been timed), then `| MFU 41.3%` where the metrics have `perf/mfu`."""
  rate, mfu = metrics.get('perf/samples_per_sec'), metrics.get('perf/mfu')
  return (f'step {step}/{total_steps} | loss {metrics["train/loss"]:.4f} | '
          + (f'{rate:.1f} samples/s | ETA {format_duration(metrics["perf/eta_seconds"])}' if rate else 'compiling')
          + (f' | MFU {mfu:.1%}' if rate and mfu is not None else ''))


def end_summary(results: dict[str, float], step: int, split: str, checkpoint_dir: str, wall_seconds: float,
                curves: str | None = None) -> str:
  """What a finished run prints last: the final eval scores, each beside its chance level where the evaluator reports
  one, then where the checkpoint is, the wall time of this run, and the commands to take it further."""
  lines = [f'Finished training at step {step} in {format_duration(wall_seconds)}.']
  if results:
    lines += [f'Results on the {split} split:', *summary_lines(results)]
  lines += ['', f'Checkpoint: {checkpoint_dir}']
  if curves:
    lines.append(f'Training curves: {curves}')
  lines += ['Next:',
            f'  python -m vlp_jax.evaluate --checkpoint={checkpoint_dir} --plots'
            '   # results table and plots; --datasets=... for other eval sets',
            f'  VLP_CHECKPOINT={checkpoint_dir} jupyter lab notebooks/explore_checkpoint.ipynb'
            '   # predictions, neighbours, affinities']
  return '\n'.join(lines)


def print_summary(results: dict[str, float], header: str) -> None:
  """A readable table of eval metrics, with the chance levels beside the scores."""
  print('\n'.join([header, *summary_lines(results)]) + '\n', flush=True)
