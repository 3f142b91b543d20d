#!/usr/bin/env python
"""Regenerate tests/fixtures/authors_losses/{slip,zerovl,cosmos}.npz from the authors' own loss code.

Dev-only: not imported by the package or the tests. It runs the authors' torch losses, unchanged, from checkouts
outside this repository on fixed-seed inputs, and stores the inputs, the loss values and their gradients with respect
to the inputs (torch autograd). tests/unit/losses/test_authors_losses.py compares our jax losses with them; the
fixtures' README names the repositories, commits and functions.

Needs torch (any CPU build), numpy, and the checkouts:

    git clone https://github.com/facebookresearch/SLIP && git -C SLIP checkout c6faf5d03cbfa7d529d210779f859cd3dddec09a
    git clone https://github.com/zerovl/ZeroVL && git -C ZeroVL checkout d923a50746f172fb1a46f5be50743c3b74e44590
    git clone https://github.com/ExplainableML/cosmos && git -C cosmos checkout c80348f08e9b02c5a81adadd7dce486b3c284b78

Usage:
    python tools/authors_losses_fixture.py --slip=SLIP --zerovl=ZeroVL --cosmos=cosmos \
        [--out=tests/fixtures/authors_losses]

Only the loss modules are loaded, not the repositories' packages, whose imports need timm and torchvision. Two
shims stand in for what the CPU and the current torch lack (neither touches the loss code):
  - ZeroVL's zerovl/utils/misc.py imports `torch._six.container_abcs`, gone from torch 2: `torch._six` is provided
    as a module whose `container_abcs` is `collections.abc` (what torch 1.x's was).
  - ZeroVL's MixUpNCE builds its gather group with `generate_local_groups`, which moves tensors to CUDA device 0
    (`.to(local_rank)` in `all_gather_object`) and fails on a CPU-only machine. With one process its result is a
    group holding rank 0 and the group rank 0, so the loss module's reference to it is replaced by exactly that,
    `(dist.new_group([0]), 0)`, on a single-process gloo group.
"""
from __future__ import annotations

import argparse
import collections.abc
import importlib
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch
import torch.distributed as dist

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / 'tests' / 'fixtures' / 'authors_losses'
PINNED_COMMITS = {
    'slip': 'c6faf5d03cbfa7d529d210779f859cd3dddec09a',
    'zerovl': 'd923a50746f172fb1a46f5be50743c3b74e44590',
    'cosmos': 'c80348f08e9b02c5a81adadd7dce486b3c284b78',
}
BATCH = 8
DIM = 16

# SLIP: its defaults (main.py --ssl-temp 0.1, --ssl-scale 1.0); a logit scale away from the 1/0.07 init.
SLIP_SSL_TEMPERATURE = 0.1
SLIP_SSL_SCALE = 1.0
SLIP_LOG_SCALE = 2.5
# ZeroVL: the constant temperature of its released configs (configs/clip/zerovl_dga.yaml), here a parameter so that
# its gradient is stored, and a mixing weight away from 1/2, where the two targets would weigh the same.
ZEROVL_TEMPERATURE = 0.02
ZEROVL_LAMBDA = 0.3
# COSMOS: 2 global crops per modality (the authors' fixed number), 2 local crops of each; the CLIP and the
# distillation scales differ, so that swapping them changes the loss.
COSMOS_GLOBAL = 2
COSMOS_LOCAL_IMAGES = 2
COSMOS_LOCAL_TEXTS = 2
COSMOS_LOG_SCALE = 2.3
COSMOS_DISTILL_LOG_SCALE = 2.9


def checkout_commit(path: str) -> str | None:
  """The HEAD commit of a git checkout, or None for a plain copy (an archive)."""
  if not os.path.isdir(os.path.join(path, '.git')):
    return None
  return subprocess.run(['git', '-C', path, 'rev-parse', 'HEAD'], check=True, capture_output=True,
                        text=True).stdout.strip()


def check_pinned(method: str, path: str) -> None:
  """Refuse a git checkout at another commit than the pinned one; a plain copy is taken on trust."""
  commit = checkout_commit(path)
  if commit is None:
    print(f'{method}: {path} is not a git checkout; assuming it holds {PINNED_COMMITS[method]}')
  elif commit != PINNED_COMMITS[method]:
    raise SystemExit(f'{method}: {path} is at {commit}, the fixture pins {PINNED_COMMITS[method]}')


def load_file(module_name: str, path: str) -> types.ModuleType:
  """Import one source file as `module_name`, without its package's __init__."""
  spec = importlib.util.spec_from_file_location(module_name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def gaussian(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Standard normal draws in float64, stored as float32."""
  return rng.standard_normal(shape).astype(np.float32)


def unit_rows(x: np.ndarray) -> np.ndarray:
  """[..., d] -> unit L2 norm along the last axis, normalised in float64, stored as float32 (what the authors'
  models hand their losses)."""
  x = x.astype(np.float64)
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def noisy_copy(rng: np.random.Generator, x: np.ndarray, noise: float) -> np.ndarray:
  """x plus Gaussian noise: a partner view that matches x more often than chance, so the losses are neither
  saturated nor at their random-guess value."""
  return (x.astype(np.float64) + noise * rng.standard_normal(x.shape)).astype(np.float32)


def leaves(arrays: dict[str, np.ndarray], differentiable: tuple[str, ...]) -> dict[str, torch.Tensor]:
  """float32 torch tensors of the arrays; those named in `differentiable` require grad."""
  return {k: torch.tensor(v, requires_grad=k in differentiable) for k, v in arrays.items()}


def gradients(output: torch.Tensor, name: str, tensors: dict[str, torch.Tensor], wrt: tuple[str, ...]
              ) -> dict[str, np.ndarray]:
  """{'grad_<name>_wrt_<input>': d output / d input} for each input in `wrt`, by torch autograd."""
  grads = torch.autograd.grad(output, [tensors[k] for k in wrt], retain_graph=True)
  return {f'grad_{name}_wrt_{k}': g.detach().numpy() for k, g in zip(wrt, grads)}


def scalar(x: torch.Tensor | float) -> np.ndarray:
  return np.asarray(x.detach().numpy() if isinstance(x, torch.Tensor) else x, np.float32)


def slip_fixture(slip_dir: str) -> dict[str, np.ndarray]:
  """SLIP's losses.SLIPLoss(SIMCLRLoss(0.1), 1.0) on raw (unnormalised) embeddings, as its models hand them:
  both losses L2-normalise inside. The logit scale enters as exp(log_scale), as SLIP's models compute it."""
  sys.path.insert(0, slip_dir)  # losses.py imports SLIP's utils.py by its top-level name
  losses = load_file('slip_losses', os.path.join(slip_dir, 'losses.py'))
  rng = np.random.default_rng(0)
  image = gaussian(rng, (BATCH, DIM))
  aug1 = gaussian(rng, (BATCH, DIM))
  inputs = {
      'image_embed': image, 'text_embed': noisy_copy(rng, image, 1.0),
      'aug1_embed': aug1, 'aug2_embed': noisy_copy(rng, aug1, 2.0),  # at tau 0.1 less noise saturates SimCLR
      'log_scale': np.float32(SLIP_LOG_SCALE),
  }
  tensors = leaves(inputs, tuple(inputs))
  criterion = losses.SLIPLoss(losses.SIMCLRLoss(temperature=SLIP_SSL_TEMPERATURE), SLIP_SSL_SCALE)
  out = criterion({**{k: tensors[k] for k in ('image_embed', 'text_embed', 'aug1_embed', 'aug2_embed')},
                   'logit_scale': tensors['log_scale'].exp()})
  clip_inputs, ssl_inputs = ('image_embed', 'text_embed', 'log_scale'), ('aug1_embed', 'aug2_embed')
  return {
      **inputs, 'ssl_temperature': scalar(SLIP_SSL_TEMPERATURE), 'ssl_scale': scalar(SLIP_SSL_SCALE),
      **{k: scalar(out[k]) for k in ('loss', 'clip_loss', 'ssl_loss', 'clip_acc', 'ssl_acc')},
      **gradients(out['clip_loss'], 'clip_loss', tensors, clip_inputs),
      **gradients(out['ssl_loss'], 'ssl_loss', tensors, ssl_inputs),
      **gradients(out['loss'], 'loss', tensors, clip_inputs + ssl_inputs),
  }


def import_zerovl_loss_module(zerovl_dir: str) -> types.ModuleType:
  """zerovl.models.criteria.losses.mml_loss, without zerovl.models' __init__ (it builds the backbones' registry
  from timm and transformers). See the module docstring for the torch._six stand-in."""
  six = types.ModuleType('torch._six')
  six.container_abcs = collections.abc
  sys.modules.setdefault('torch._six', six)
  sys.path.insert(0, zerovl_dir)
  for package in ('zerovl.models', 'zerovl.models.criteria'):
    stub = types.ModuleType(package)
    stub.__path__ = [os.path.join(zerovl_dir, *package.split('.'))]
    sys.modules[package] = stub
  return importlib.import_module('zerovl.models.criteria.losses.mml_loss')


def zerovl_fixture(zerovl_dir: str) -> dict[str, np.ndarray]:
  """ZeroVL's MixUpNCE (global_reduce with gather_backward, as configs/clip/zerovl_dga.yaml) on unit embeddings,
  averaged over both directions as its CLIPModel.forward does: (loss(zi, zt) + loss(zt, zi)) / 2. The
  temperature is MixUpNCE's own parameter (temperature.name 'parameter'), so its gradient is stored too."""
  mml_loss = import_zerovl_loss_module(zerovl_dir)
  mml_loss.generate_local_groups = lambda group_size: (dist.new_group([0]), 0)  # see the module docstring
  ns = types.SimpleNamespace
  cfg = ns(loss=ns(global_reduce=True, group_size=-1, smoothing=0.0, nce_loss=ns(gather_backward=True),
                   temperature=ns(name='parameter', value=ZEROVL_TEMPERATURE)))
  criterion = mml_loss.MixUpNCE(cfg, 0)
  rng = np.random.default_rng(1)
  zi = gaussian(rng, (BATCH, DIM))
  text = noisy_copy(rng, zi, 1.0).astype(np.float64)
  # A text-mixed batch (the coin's tails): row i mixes text i with text B-1-i before the L2 norm, so that both of
  # its targets are near; unmixed random partners would put the loss far from training's.
  mixed_text = ZEROVL_LAMBDA * text + (1.0 - ZEROVL_LAMBDA) * text[::-1]
  inputs = {'zi': unit_rows(zi), 'zt': unit_rows(mixed_text), 'lam': np.float32(ZEROVL_LAMBDA)}
  tensors = leaves(inputs, ('zi', 'zt'))
  lam = float(inputs['lam'])
  # Either modality's weight enters the loss the same way (image_alpha when images were mixed, text_alpha else).
  i2t, _ = criterion(tensors['zi'], tensors['zt'], ignore_mask=None, image_alpha=lam)
  t2i, _ = criterion(tensors['zt'], tensors['zi'], ignore_mask=None, image_alpha=lam)
  loss = 0.5 * (i2t + t2i)
  tensors['temperature'] = criterion.temperature
  return {
      **inputs, 'temperature': scalar(criterion.temperature),
      'loss': scalar(loss), 'loss_i2t': scalar(i2t), 'loss_t2i': scalar(t2i),
      **gradients(loss, 'loss', tensors, ('zi', 'zt', 'temperature')),
  }


def cosmos_fixture(cosmos_dir: str) -> dict[str, np.ndarray]:
  """COSMOS's open_clip/loss.py COSMOSLoss on unit embeddings, each crop c of a [B, C, d] input handed over as one
  [B, d] tensor of the list (train.py's `.chunk(num_crops)`), global crops first; both scales enter as exp(log),
  as its CLIP model computes them. The teacher's embeddings carry no gradient (the loss detaches them)."""
  loss_module = load_file('cosmos_open_clip_loss', os.path.join(cosmos_dir, 'src', 'open_clip', 'loss.py'))
  rng = np.random.default_rng(2)
  num_images, num_texts = COSMOS_GLOBAL + COSMOS_LOCAL_IMAGES, COSMOS_GLOBAL + COSMOS_LOCAL_TEXTS
  s_image = gaussian(rng, (BATCH, num_images, DIM))
  s_text = noisy_copy(rng, s_image[:, :1].repeat(num_texts, axis=1), 1.5)
  inputs = {
      's_image_features': unit_rows(s_image), 's_text_features': unit_rows(s_text),
      's_img_crossmodal_features': unit_rows(noisy_copy(rng, s_image, 0.5)),
      's_txt_crossmodal_features': unit_rows(noisy_copy(rng, s_text, 0.5)),
      't_image_features': unit_rows(noisy_copy(rng, s_image[:, :COSMOS_GLOBAL], 0.5)),
      't_text_features': unit_rows(noisy_copy(rng, s_text[:, :COSMOS_GLOBAL], 0.5)),
      'log_scale': np.float32(COSMOS_LOG_SCALE), 'distill_log_scale': np.float32(COSMOS_DISTILL_LOG_SCALE),
  }
  student = ('s_image_features', 's_text_features', 's_img_crossmodal_features', 's_txt_crossmodal_features')
  tensors = leaves(inputs, student + ('log_scale', 'distill_log_scale'))
  crops = {k: list(torch.unbind(tensors[k], dim=1)) for k in student + ('t_image_features', 't_text_features')}
  out = loss_module.COSMOSLoss()(**crops, logit_scale=tensors['log_scale'].exp(),
                                 distill_logit_scale=tensors['distill_log_scale'].exp(), output_dict=True)
  loss = sum(out.values())  # train.py: total_loss = sum(losses.values())
  return {
      **inputs, 'loss': scalar(loss), 'clip_loss': scalar(out['clip_loss']),
      'distill_loss': scalar(out['distill_loss']),
      **gradients(loss, 'loss', tensors, student + ('log_scale', 'distill_log_scale')),
  }


def init_single_process_group(directory: str) -> None:
  """A gloo group of one process: ZeroVL's loss gathers through torch.distributed whatever the world size."""
  dist.init_process_group('gloo', init_method=f'file://{os.path.join(directory, "store")}', rank=0, world_size=1)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--slip', required=True, help='checkout of github.com/facebookresearch/SLIP')
  parser.add_argument('--zerovl', required=True, help='checkout of github.com/zerovl/ZeroVL')
  parser.add_argument('--cosmos', required=True, help='checkout of github.com/ExplainableML/cosmos')
  parser.add_argument('--out', default=str(DEFAULT_OUT))
  args = parser.parse_args()
  dirs = {'slip': args.slip, 'zerovl': args.zerovl, 'cosmos': args.cosmos}
  for method, path in dirs.items():
    check_pinned(method, path)
  builders = {'slip': slip_fixture, 'zerovl': zerovl_fixture, 'cosmos': cosmos_fixture}
  torch.set_grad_enabled(True)
  os.makedirs(args.out, exist_ok=True)
  with tempfile.TemporaryDirectory() as store:
    init_single_process_group(store)
    try:
      for method, build in builders.items():
        arrays = build(os.path.abspath(dirs[method]))
        path = os.path.join(args.out, f'{method}.npz')
        np.savez(path, **arrays)
        print(f'{path}: {os.path.getsize(path)} bytes, ' + ', '.join(f'{k}{list(v.shape)}' for k, v in arrays.items()))
    finally:
      dist.destroy_process_group()


if __name__ == '__main__':
  main()
